package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
)

// Extra keys of a TokenReview status for a token bound to a pod (the
// projected ServiceAccount tokens the kubelet mounts).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
	// The node the pod was bound to when the token was issued; set since
	// Kubernetes 1.30 (ServiceAccountTokenPodNodeInfo), absent before.
	extraNodeName = "authentication.kubernetes.io/node-name"
	saPrefix      = "system:serviceaccount:"
)

// Reviewer asks the API server about a token (a TokenReview create);
// NewReviewer is the production one.
type Reviewer interface {
	Review(ctx context.Context, token string, audiences []string) (*authv1.TokenReviewStatus, error)
}

// TokenReviewConfig configures TokenReview.
type TokenReviewConfig struct {
	// Reviewer reaches the API server; required.
	Reviewer Reviewer
	// Audience the token must be issued for; zero means "meshdns". A
	// token for the API server (or any other audience) is refused, so a
	// token stolen from elsewhere does not open a stream, and a meshdns
	// token does not work against the API server.
	Audience string
	// CacheTTL is how long a verdict is reused for the same token; zero
	// means 10s. Failures are cached for a fifth of it. The cache holds at
	// most CacheSize verdicts (zero means 4096), dropping the oldest.
	CacheTTL  time.Duration
	CacheSize int
	// MaxInFlight bounds concurrent reviews, so a connection storm does not
	// become an API server storm; beyond it a request waits for a slot up
	// to QueueTimeout, then gets ErrUnavailable. Zero means 16 and 2s.
	MaxInFlight  int
	QueueTimeout time.Duration
	// Timeout of one review; zero means 5s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// TokenReview verifies projected ServiceAccount tokens with the API server
// and takes the namespace, service account and bound pod from its answer.
// Tokens that cannot be valid (not a JWT, another audience, expired) are
// refused without asking it (precheck).
// Tokens not bound to a pod are refused: the pod name must come from the
// credential, not from the agent.
func TokenReview(cfg TokenReviewConfig) (Authenticator, error) {
	if cfg.Reviewer == nil {
		return nil, errors.New("tokenreview: Reviewer is required")
	}
	if cfg.Audience == "" {
		cfg.Audience = "meshdns"
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 10 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 4096
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 16
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &tokenReview{cfg: cfg, sem: make(chan struct{}, cfg.MaxInFlight), cache: map[[32]byte]verdict{}}, nil
}

type tokenReview struct {
	cfg TokenReviewConfig
	sem chan struct{}

	mu    sync.Mutex // guards following
	cache map[[32]byte]verdict
	order [][32]byte // insertion order, for eviction
}

// verdict is a cached answer; the token itself is never kept, only its
// SHA-256.
type verdict struct {
	id      Identity
	err     error
	expires time.Time
}

func (t *tokenReview) Authenticate(ctx context.Context, r Request) (Identity, error) {
	if r.Token == "" {
		return Identity{}, ErrNoCredential
	}
	now := t.cfg.Now()
	exp, err := precheck(r.Token, t.cfg.Audience, now)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	key := sha256.Sum256([]byte(r.Token))
	t.mu.Lock()
	v, ok := t.cache[key]
	t.mu.Unlock()
	if ok && now.Before(v.expires) {
		return withExpiry(v.id, v.err, exp)
	}
	// Wait for a review slot rather than refuse at once: a reconnect
	// storm of real agents is then served in turns instead of sent back
	// to their backoff. Callers bound how many of one peer may wait.
	wait := time.NewTimer(t.cfg.QueueTimeout)
	select {
	case t.sem <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		return Identity{}, fmt.Errorf("%w: too many token reviews in flight", ErrUnavailable)
	case <-ctx.Done():
		wait.Stop()
		return Identity{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	id, err := t.review(ctx, r.Token)
	<-t.sem
	if errors.Is(err, ErrUnavailable) {
		return id, err // not the token's fault: ask again next time
	}
	ttl := t.cfg.CacheTTL
	if err != nil {
		ttl /= 5
	}
	t.store(key, verdict{id: id, err: err, expires: now.Add(ttl)})
	return withExpiry(id, err, exp)
}

// withExpiry sets the expiry of an accepted token's identity: its exp
// claim, which the review verified with the rest of the token.
func withExpiry(id Identity, err error, exp time.Time) (Identity, error) {
	if err == nil {
		id.Expires = exp
	}
	return id, err
}

func (t *tokenReview) store(key [32]byte, v verdict) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.cache[key]; !ok {
		t.order = append(t.order, key)
	}
	t.cache[key] = v
	for len(t.order) > t.cfg.CacheSize {
		delete(t.cache, t.order[0])
		t.order = t.order[1:]
	}
}

func (t *tokenReview) review(ctx context.Context, token string) (Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	st, err := t.cfg.Reviewer.Review(ctx, token, []string{t.cfg.Audience})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: token review: %w", ErrUnavailable, err)
	}
	return identityFromReview(st, t.cfg.Audience)
}

// identityFromReview turns a TokenReview status into an identity, or says
// why it is refused.
func identityFromReview(st *authv1.TokenReviewStatus, audience string) (Identity, error) {
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return Identity{}, fmt.Errorf("%w: token review: %s", ErrInvalid, msg)
	}
	// The API server only authenticates a token for the audiences asked
	// when it can; an authenticator that ignores audiences answers with
	// none, which must not pass.
	if !slices.Contains(st.Audiences, audience) {
		return Identity{}, fmt.Errorf("%w: token not issued for audience %q", ErrInvalid, audience)
	}
	name := st.User.Username
	rest, ok := strings.CutPrefix(name, saPrefix)
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" {
		return Identity{}, fmt.Errorf("%w: %q is not a service account", ErrInvalid, name)
	}
	pod, uid := one(st.User.Extra[extraPodName]), one(st.User.Extra[extraPodUID])
	if pod == "" || uid == "" {
		return Identity{}, fmt.Errorf("%w: token of %s is not bound to a pod", ErrInvalid, name)
	}
	return Identity{Method: MethodToken, Namespace: ns, Pod: pod, PodUID: uid, Node: one(st.User.Extra[extraNodeName]),
		ServiceAccount: sa, Subject: name}, nil
}

func one(v authv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}
