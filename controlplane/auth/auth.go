// Package auth verifies who an agent is before the control plane serves it
// a name table: the namespace (and pod) an agent may see comes from a
// credential the control plane checked, never from what the agent claims.
//
// Three authenticators exist: TokenReview (a projected ServiceAccount token,
// verified by the Kubernetes API server), SPIFFE (the URI SAN of a client
// certificate the TLS layer verified) and Insecure (no check: the agent's
// claim is taken as is, for file-only setups that opt in explicitly). Chain
// combines them.
//
// What each proves differs: a pod-bound token the namespace, service
// account, pod (name and UID) and node; a SPIFFE ID only the trust
// domain, namespace and service account, which every pod of the service
// account may share (Identity.PodProven is false). Both expire
// (Identity.Expires), and a stream ends with its credential.
package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"time"
)

// Methods, also the values of the method metric label.
const (
	MethodToken    = "token"
	MethodSPIFFE   = "spiffe"
	MethodInsecure = "insecure"
)

// Sentinel errors. The server maps ErrNoCredential and ErrInvalid to
// codes.Unauthenticated and ErrUnavailable to codes.Unavailable.
var (
	// ErrNoCredential: the request carries no credential this
	// authenticator understands (no token, no certificate).
	ErrNoCredential = errors.New("no credential")
	// ErrInvalid: a credential was presented and refused.
	ErrInvalid = errors.New("invalid credential")
	// ErrUnavailable: the credential could not be checked now (the API
	// server is unreachable or too many reviews are in flight).
	ErrUnavailable = errors.New("cannot verify credential now")
)

// Request is what an agent presented when it opened its stream.
type Request struct {
	// Token is the bearer token of the "authorization" metadata, or "".
	Token string
	// Chains are the client certificate chains the TLS handshake verified
	// (leaf first), or nil without mTLS.
	Chains [][]*x509.Certificate
}

// Identity is a verified agent identity.
type Identity struct {
	// Method that verified it (MethodToken, MethodSPIFFE, MethodInsecure).
	Method string
	// Namespace the agent is in; "" only for MethodInsecure, where the
	// agent's own claim is used.
	Namespace string
	// Pod name bound to the credential, or "" when the credential does
	// not name a pod (a SPIFFE certificate names a service account).
	Pod string
	// PodUID is the UID of that pod, from the credential, or "": a pod
	// deleted and created again under the same name has another.
	PodUID string
	// Node the pod runs on, from the credential (a pod-bound token's
	// node-name claim), or "" when the credential does not name one.
	Node string
	// ServiceAccount of the credential, or "".
	ServiceAccount string
	// Subject names the credential in logs and per-identity limits: the
	// user name of a token, the SPIFFE ID of a certificate.
	Subject string
	// Expires is when the credential stops being valid (a token's exp
	// claim, the earliest NotAfter of a certificate's verified chain), or
	// zero when it does not expire (Insecure). A stream opened with it
	// ends then: the agent reconnects with the credential it holds now.
	Expires time.Time
}

// PodProven reports whether the credential proves which pod the agent runs
// in (a pod-bound token), not only its namespace and service account (a
// SPIFFE certificate, which every pod of the service account shares).
func (i Identity) PodProven() bool { return i.Verified() && i.Pod != "" }

// Verified reports whether the identity was checked (anything but Insecure).
func (i Identity) Verified() bool { return i.Method != MethodInsecure && i.Method != "" }

// Authenticator verifies one request. Implementations are safe for
// concurrent use. Authenticate returns ErrNoCredential (wrapped or not)
// when the request carries nothing it can check, so Chain tries the next.
type Authenticator interface {
	Authenticate(ctx context.Context, r Request) (Identity, error)
}

// Chain tries each authenticator in order and returns the first identity.
// An authenticator that found its credential and refused it ends the chain:
// a bad token is not rescued by falling through to Insecure.
func Chain(as ...Authenticator) Authenticator { return chain(as) }

type chain []Authenticator

func (c chain) Authenticate(ctx context.Context, r Request) (Identity, error) {
	for _, a := range c {
		id, err := a.Authenticate(ctx, r)
		if errors.Is(err, ErrNoCredential) {
			continue
		}
		return id, err
	}
	return Identity{}, ErrNoCredential
}

// Insecure accepts every request without a check; the server then takes
// the namespace and pod the agent claims. Only for setups that turned
// authentication off explicitly (--insecure-allow-unauthenticated).
func Insecure() Authenticator { return insecure{} }

type insecure struct{}

func (insecure) Authenticate(context.Context, Request) (Identity, error) {
	return Identity{Method: MethodInsecure}, nil
}
