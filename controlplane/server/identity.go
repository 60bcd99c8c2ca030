package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/view"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Admission results, the values of the result label of
// meshdns_controlplane_stream_admissions_total.
const (
	admitOK              = "ok"
	admitInvalid         = "invalid"         // no namespace claimed
	admitUnauthenticated = "unauthenticated" // no or a bad credential
	admitDenied          = "denied"          // claims differ from the identity
	admitLimited         = "limited"         // per-identity or global bounds
	admitUnavailable     = "unavailable"     // the credential could not be checked now
)

// errRebind ends the stream of an agent whose namespace got a view of its
// own (view.Sub.Rebind); the agent reconnects at once.
var errRebind = status.Error(codes.Unavailable, "the namespace's view changed; reconnect")

// verified is what the server learned at admission.
type verified struct {
	id auth.Identity
	// namespace and pod are what the stream is filed under (its logs,
	// /debug/agents, its failing-names report): the verified names, or
	// "sa:<serviceaccount>" as pod when the credential proves no pod
	// (SPIFFE), or, insecure, the claimed ones.
	namespace, pod string
	claimedPod     string // the agent's claim, when the credential proves no pod
	domain         string // claimed cluster domain
	key            string // of the per-identity limits
	release        func()
}

// saPodPrefix files the stream of an agent whose credential names a
// service account but no pod: "sa:web" is no valid pod name, so it
// cannot be taken for one.
const saPodPrefix = "sa:"

// authorize authenticates the first request of a stream, checks its claims
// against the identity and applies the per-identity bounds. Every refusal
// is counted; refusals are logged at Warn, with the peer and the subject,
// never the credential, at most refusalLogBurst per refusalLogWindow for
// each result (the next line logged says how many were suppressed).
func (s *Server) authorize(ctx context.Context, claim *meshdnsv1.AgentIdentity) (*verified, error) {
	peerAddr := ""
	p, _ := peer.FromContext(ctx)
	if p != nil && p.Addr != nil {
		peerAddr = p.Addr.String()
	}
	req := auth.Request{Token: bearer(ctx)}
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			req.Chains = ti.State.VerifiedChains
		}
	}
	refuse := func(result, method string, code codes.Code, msg string, args ...any) error {
		s.m.admissions.WithLabelValues(result, method).Inc()
		if ok, dropped := s.refusals.allow(result); ok {
			attrs := []any{"result", result, "peer", peerAddr,
				"claimed", claim.GetNamespace() + "/" + claim.GetPodName(), "err", fmt.Sprintf(msg, args...)}
			if dropped > 0 {
				attrs = append(attrs, "suppressed", dropped)
			}
			s.log.Warn("agent stream refused", attrs...)
		}
		return status.Errorf(code, msg, args...)
	}
	addr := peerIP(ctx)
	done, why := s.peers.begin(addr, s.cfg.Now())
	if why != "" {
		return nil, refuse(admitLimited, "none", codes.ResourceExhausted, "%s", why)
	}
	id, err := s.auth.Authenticate(ctx, req)
	done(err != nil && !errors.Is(err, auth.ErrUnavailable), s.cfg.Now())
	switch {
	case errors.Is(err, auth.ErrUnavailable):
		return nil, refuse(admitUnavailable, "none", codes.Unavailable, "authenticate: %v", err)
	case errors.Is(err, auth.ErrNoCredential):
		return nil, refuse(admitUnauthenticated, "none", codes.Unauthenticated,
			"authenticate: no credential (a bearer token in %q or a client certificate)", "authorization")
	case err != nil:
		return nil, refuse(admitUnauthenticated, "none", codes.Unauthenticated, "authenticate: %v", err)
	}
	method := id.Method
	ver, code, why := s.checkClaim(id, claim)
	if why != "" {
		result := admitDenied
		switch code {
		case codes.InvalidArgument:
			result = admitInvalid
		case codes.Unauthenticated:
			result = admitUnauthenticated
		}
		return nil, refuse(result, method, code, "%s", why)
	}
	// Limits are keyed by what the credential proves: a pod-bound token
	// by its pod; a SPIFFE ID, shared by every pod of its service
	// account, by the ID alone, with the room of MaxPodsPerSPIFFEID pods
	// (claiming pod names does not open more).
	scale := 1
	ver.key = method + ":" + ver.namespace + "/" + ver.pod
	switch {
	case id.PodProven():
		ver.key = method + ":" + id.Subject + "/" + id.Pod
	case id.Verified():
		ver.key, scale = method+":"+id.Subject, s.cfg.MaxPodsPerSPIFFEID
	}
	domain := registry.CanonicalHost(claim.GetClusterDomain())
	release, why := s.limits.acquire(ver.key, scale, domain, s.cfg.Now())
	if why != "" {
		return nil, refuse(admitLimited, method, codes.ResourceExhausted, "%s", why)
	}
	ver.release = release
	s.m.admissions.WithLabelValues(admitOK, method).Inc()
	return ver, nil
}

// checkClaim checks the agent's claim against the identity its credential
// proves and returns what the stream is filed under, or the code and the
// reason of a refusal.
func (s *Server) checkClaim(id auth.Identity, claim *meshdnsv1.AgentIdentity) (*verified, codes.Code, string) {
	ns, pod := claim.GetNamespace(), claim.GetPodName()
	ver := &verified{id: id, domain: claim.GetClusterDomain()}
	if id.Verified() {
		// The identity wins; a claim is only checked against it. An agent
		// may leave its namespace or pod out and get the verified ones.
		if ns != "" && ns != id.Namespace {
			return nil, codes.PermissionDenied, fmt.Sprintf("namespace %q claimed, but the credential of %s is for namespace %q",
				ns, id.Subject, id.Namespace)
		}
		if id.Pod != "" && pod != "" && pod != id.Pod {
			return nil, codes.PermissionDenied, fmt.Sprintf("pod %q claimed, but the credential of %s is bound to pod %q",
				pod, id.Subject, id.Pod)
		}
		if !id.Expires.IsZero() && !s.cfg.Now().Before(id.Expires) {
			return nil, codes.Unauthenticated, fmt.Sprintf("the credential of %s expired at %s", id.Subject,
				id.Expires.UTC().Format(time.RFC3339))
		}
		ns = id.Namespace
		if id.PodProven() {
			pod = id.Pod
		} else {
			// A SPIFFE ID names every pod of its service account: the pod
			// claimed is kept for /debug/agents only, never as the pod
			// the stream speaks for.
			ver.claimedPod, pod = pod, saPodPrefix+id.ServiceAccount
		}
	}
	if ns == "" {
		return nil, codes.InvalidArgument, "first request must carry identity with a namespace"
	}
	ver.namespace, ver.pod = ns, pod
	return ver, codes.OK, ""
}

// viewKey is the view an admitted agent subscribes to (the store maps a
// namespace no source names to its shared view).
func (a *verified) viewKey() view.Key {
	return view.Key{Namespace: a.namespace, ClusterDomain: a.domain}
}

// bearer returns the token of the "authorization: Bearer <token>"
// metadata, or "".
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, tok, ok := strings.Cut(v, " ")
		if ok && strings.EqualFold(scheme, "bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// limits bounds what one identity may hold: concurrent streams, the rate
// of new ones, and, for the whole server, the cluster domains other than
// the control plane's (each is a further view of every namespace).
type limits struct {
	maxStreams  int
	maxDomains  int
	localDomain string

	mu      sync.Mutex      // guards following
	ids     buckets[string] // held: streams open; tokens: reconnects still allowed
	domains map[string]int  // foreign cluster domain -> live streams
}

// maxIdentities bounds the per-identity state kept for identities without
// streams (their reconnect budget); beyond it the idle ones are forgotten.
const maxIdentities = 100_000

// newLimits allows each identity of one pod maxStreams streams and rate
// new ones a second, up to burst, and the server maxDomains cluster
// domains besides localDomain.
func newLimits(maxStreams, burst int, rate float64, maxDomains int, localDomain string) *limits {
	return &limits{maxStreams: maxStreams, maxDomains: maxDomains, localDomain: localDomain,
		ids: newBuckets[string](float64(burst), rate, maxIdentities), domains: map[string]int{}}
}

// acquire takes a stream of identity key, which stands for scale pods
// (a SPIFFE ID for all those of its service account, anything else for
// one): its streams and reconnects are bounded at scale times one pod's.
func (l *limits) acquire(key string, scale int, domain string, now time.Time) (release func(), why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.ids.get(key, scale, now)
	switch {
	case st.held >= l.maxStreams*int(st.scale):
		return nil, fmt.Sprintf("identity already has %d streams open (the limit)", st.held)
	case st.tokens < 1:
		return nil, "identity reconnects too often; back off"
	}
	foreign := domain != "" && domain != l.localDomain
	if foreign && l.domains[domain] == 0 && len(l.domains) >= l.maxDomains {
		return nil, fmt.Sprintf("too many cluster domains in use (%d); %q refused", len(l.domains), domain)
	}
	l.ids.take(st, now)
	st.held++
	if foreign {
		l.domains[domain]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			st.held--
			if foreign {
				if l.domains[domain]--; l.domains[domain] == 0 {
					delete(l.domains, domain)
				}
			}
		})
	}, ""
}
