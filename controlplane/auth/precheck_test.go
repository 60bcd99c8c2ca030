package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// jwt builds a token shaped like a projected ServiceAccount token with
// the given header and claims and a made-up signature: precheck must not
// care that it is not signed.
func jwt(header, claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("not a signature"))
}

func claims(aud any, exp int64, more ...any) map[string]any {
	c := map[string]any{"aud": aud, "exp": exp, "sub": "system:serviceaccount:ns-a:default"}
	for i := 0; i+1 < len(more); i += 2 {
		c[more[i].(string)] = more[i+1]
	}
	return c
}

var es256 = map[string]any{"alg": "ES256", "kid": "k"}

// Tokens of the fake reviewers: plausible, so they pass precheck.
var (
	goodToken  = jwt(es256, claims("meshdns", 4102444800, "jti", "good"))
	badToken   = jwt(es256, claims("meshdns", 4102444800, "jti", "bad"))
	otherToken = jwt(es256, claims("meshdns", 4102444800, "jti", "other"))
)

func TestPrecheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(10 * time.Minute).Unix()
	tests := []struct {
		name, token string
		wantErr     string // "" for a token worth a review
	}{
		{name: "projected token", token: jwt(es256, claims("meshdns", exp))},
		{name: "audience among several", token: jwt(es256, claims([]string{"api", "meshdns"}, exp))},
		{name: "expired within the clock skew", token: jwt(es256, claims("meshdns", now.Add(-30*time.Second).Unix()))},
		{name: "valid soon, within the skew", token: jwt(es256, claims("meshdns", exp, "nbf", now.Add(30*time.Second).Unix()))},
		{name: "garbage", token: "garbage", wantErr: "not a JWT"},
		{name: "two parts", token: "a.b", wantErr: "not a JWT"},
		{name: "empty signature", token: strings.TrimSuffix(jwt(es256, claims("meshdns", exp)), base64.RawURLEncoding.EncodeToString([]byte("not a signature"))), wantErr: "not a JWT"},
		{name: "header not base64", token: "!!!." + strings.SplitN(jwt(es256, claims("meshdns", exp)), ".", 2)[1], wantErr: "bad header"},
		{name: "alg none", token: jwt(map[string]any{"alg": "none"}, claims("meshdns", exp)), wantErr: "bad header"},
		{name: "no alg", token: jwt(map[string]any{"kid": "k"}, claims("meshdns", exp)), wantErr: "bad header"},
		{name: "claims not JSON", token: jwt(es256, nil)[:len(jwt(es256, nil))-len(".bm90IGEgc2lnbmF0dXJl")] + "x.bm90IGEgc2lnbmF0dXJl", wantErr: "bad claims"},
		{name: "another audience", token: jwt(es256, claims("https://kubernetes.default.svc", exp)), wantErr: `audience "meshdns"`},
		{name: "no audience", token: jwt(es256, map[string]any{"exp": exp}), wantErr: `audience "meshdns"`},
		{name: "audience of the wrong type", token: jwt(es256, claims(42, exp)), wantErr: "bad claims"},
		{name: "expired", token: jwt(es256, claims("meshdns", now.Add(-2*time.Minute).Unix())), wantErr: "expired"},
		{name: "no expiry", token: jwt(es256, map[string]any{"aud": "meshdns"}), wantErr: "without expiry"},
		{name: "not yet valid", token: jwt(es256, claims("meshdns", exp, "nbf", now.Add(5*time.Minute).Unix())), wantErr: "not valid before"},
		{name: "too long", token: jwt(es256, claims("meshdns", exp, "pad", strings.Repeat("x", maxTokenBytes))), wantErr: "not a JWT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := precheck(tc.token, "meshdns", now)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestPrecheckSparesTheAPIServer checks that tokens which cannot be valid
// are refused as invalid without a review, and that a plausible one is
// still reviewed (precheck trusts nothing).
func TestPrecheckSparesTheAPIServer(t *testing.T) {
	r := &countingReviewer{}
	now := time.Unix(1_800_000_000, 0)
	a, err := TokenReview(TokenReviewConfig{Reviewer: r, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range []string{"garbage", jwt(es256, claims("api", now.Add(time.Hour).Unix())), jwt(es256, claims("meshdns", now.Add(-time.Hour).Unix()))} {
		if _, err := a.Authenticate(context.Background(), Request{Token: tok}); !errors.Is(err, ErrInvalid) {
			t.Errorf("token %d: %v, want ErrInvalid", i, err)
		}
	}
	if got := r.calls.Load(); got != 0 {
		t.Errorf("%d reviews for tokens that cannot be valid, want 0", got)
	}
	if _, err := a.Authenticate(context.Background(), Request{Token: badToken}); !errors.Is(err, ErrInvalid) || r.calls.Load() != 1 {
		t.Errorf("plausible but refused token: %v after %d reviews, want ErrInvalid after 1", err, r.calls.Load())
	}
}

// TestTokenReviewQueue checks that a review beyond MaxInFlight waits for
// a slot instead of failing at once.
func TestTokenReviewQueue(t *testing.T) {
	block := &countingReviewer{block: make(chan struct{})}
	a, _ := TokenReview(TokenReviewConfig{Reviewer: block, MaxInFlight: 1, QueueTimeout: time.Hour})
	first := make(chan error, 1)
	go func() { _, err := a.Authenticate(context.Background(), Request{Token: goodToken}); first <- err }()
	for block.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { _, err := a.Authenticate(context.Background(), Request{Token: otherToken}); second <- err }()
	close(block.block) // both reviews may now finish
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, ErrInvalid) {
		t.Fatalf("queued review: %v, want the reviewer's verdict (ErrInvalid)", err)
	}
	if got := block.calls.Load(); got != 2 {
		t.Errorf("reviews = %d, want 2", got)
	}
}

func FuzzPrecheck(f *testing.F) {
	// A plausible token, garbage, a token without claims, one with an
	// audience list.
	f.Add(goodToken)
	f.Add("garbage")
	f.Add("e30.e30.e30")
	f.Add(jwt(es256, claims([]string{"a", "meshdns"}, 1)))
	f.Fuzz(func(t *testing.T, token string) {
		_, err := precheck(token, "meshdns", time.Unix(1_800_000_000, 0))
		if err == nil && strings.Count(token, ".") != 2 {
			t.Fatalf("token %q with %d dots passed", token, strings.Count(token, "."))
		}
	})
}
