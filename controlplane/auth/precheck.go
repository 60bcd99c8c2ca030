package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// maxTokenBytes bounds a token worth asking the API server about: a
// projected ServiceAccount token is about a kilobyte.
const maxTokenBytes = 16 << 10

// clockSkew is how far the control plane's clock may be from the token
// issuer's before an expired or not yet valid token is refused unasked;
// the API server's own validation allows the same minute.
const clockSkew = time.Minute

var errNotJWT = errors.New("not a JWT")

// precheck refuses a token that cannot be valid, without the API server:
// not a JWT (three base64url parts, a JSON header naming a signature
// algorithm, JSON claims), not issued for audience, expired, or not yet
// valid. Nothing here is trusted: the signature is not checked, so a
// token that passes still goes to the TokenReview. It only keeps garbage
// from using the reviews real agents wait for. It returns the token's
// expiry (its exp claim), which is the token's own once the review
// verified the signature over it.
func precheck(token, audience string, now time.Time) (exp time.Time, err error) {
	if len(token) > maxTokenBytes {
		return time.Time{}, fmt.Errorf("%w: %d bytes", errNotJWT, len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return time.Time{}, errNotJWT
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodePart(parts[0], &header); err != nil || header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return time.Time{}, fmt.Errorf("%w: bad header", errNotJWT)
	}
	if _, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil {
		return time.Time{}, fmt.Errorf("%w: bad signature encoding", errNotJWT)
	}
	var claims struct {
		Aud audiences `json:"aud"`
		Exp *float64  `json:"exp"`
		Nbf *float64  `json:"nbf"`
	}
	if err := decodePart(parts[1], &claims); err != nil {
		return time.Time{}, fmt.Errorf("%w: bad claims", errNotJWT)
	}
	if !claims.Aud.has(audience) {
		return time.Time{}, fmt.Errorf("token not issued for audience %q", audience)
	}
	// Projected tokens always expire; one that does not is not bound to a
	// pod either, which the review would refuse.
	if claims.Exp == nil {
		return time.Time{}, errors.New("token without expiry")
	}
	exp = time.Unix(int64(*claims.Exp), 0)
	if now.After(exp.Add(clockSkew)) {
		return time.Time{}, fmt.Errorf("token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if claims.Nbf != nil {
		if nbf := time.Unix(int64(*claims.Nbf), 0); nbf.After(now.Add(clockSkew)) {
			return time.Time{}, fmt.Errorf("token not valid before %s", nbf.UTC().Format(time.RFC3339))
		}
	}
	return exp, nil
}

func decodePart(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// audiences is the aud claim: one string or a list (RFC 7519 4.1.3).
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audiences{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

func (a audiences) has(want string) bool {
	for _, s := range a {
		if s == want {
			return true
		}
	}
	return false
}
