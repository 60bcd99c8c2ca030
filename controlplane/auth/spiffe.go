package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/meshdns/meshdns/internal/dnsname"
)

// SPIFFE takes the identity from the client certificate the TLS layer
// verified against the client CA: its one SPIFFE URI SAN
// spiffe://<trustDomain>/ns/<namespace>/sa/<serviceaccount> (the form
// Istio and SPIRE issue on Kubernetes). A certificate of another trust
// domain, with several SPIFFE IDs, or another path is refused; one with
// none is no credential (ErrNoCredential). The identity has no pod: a
// SPIFFE ID names a service account, which many pods share. It expires
// with the first certificate of the verified chain to expire.
func SPIFFE(trustDomain string) (Authenticator, error) {
	td := strings.ToLower(strings.TrimSuffix(trustDomain, "."))
	if dnsname.Check(td, false) != nil {
		return nil, fmt.Errorf("spiffe: invalid trust domain %q", trustDomain)
	}
	return spiffe{trustDomain: td}, nil
}

type spiffe struct{ trustDomain string }

func (s spiffe) Authenticate(_ context.Context, r Request) (Identity, error) {
	if len(r.Chains) == 0 || len(r.Chains[0]) == 0 {
		return Identity{}, ErrNoCredential
	}
	leaf := r.Chains[0][0]
	var ids []*url.URL
	for _, u := range leaf.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			ids = append(ids, u)
		}
	}
	switch len(ids) {
	case 0:
		// A certificate that names no workload is no identity (it may
		// still carry a token, or the setup may allow unauthenticated
		// agents).
		return Identity{}, fmt.Errorf("%w: certificate %q has no SPIFFE ID", ErrNoCredential, leaf.Subject.CommonName)
	case 1:
	default:
		return Identity{}, fmt.Errorf("%w: certificate %q has %d SPIFFE IDs, want one", ErrInvalid, leaf.Subject.CommonName, len(ids))
	}
	ns, sa, err := parseSPIFFE(ids[0], s.trustDomain)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// The certificate proves the trust domain, namespace and service
	// account, not a pod: every pod of the service account may hold the
	// same ID, so Pod stays empty whatever the agent claims.
	return Identity{Method: MethodSPIFFE, Namespace: ns, ServiceAccount: sa, Subject: ids[0].String(),
		Expires: notAfter(r.Chains[0])}, nil
}

// notAfter is when the first certificate of chain expires.
func notAfter(chain []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range chain {
		if t.IsZero() || c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

// parseSPIFFE checks u is spiffe://td/ns/<ns>/sa/<sa> and returns ns and sa.
func parseSPIFFE(u *url.URL, td string) (ns, sa string, err error) {
	if !strings.EqualFold(u.Host, td) {
		return "", "", fmt.Errorf("SPIFFE ID %s: trust domain %q, want %q", u, u.Host, td)
	}
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("SPIFFE ID %s: not a plain path", u)
	}
	parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || !label(parts[1]) || !label(parts[3]) {
		return "", "", fmt.Errorf("SPIFFE ID %s: want spiffe://%s/ns/<namespace>/sa/<serviceaccount>", u, td)
	}
	return parts[1], parts[3], nil
}

// label reports whether s is a Kubernetes namespace or service account
// name: a DNS label or subdomain (RFC 1123), lower case.
func label(s string) bool {
	return s == strings.ToLower(s) && dnsname.Check(s, false) == nil
}
