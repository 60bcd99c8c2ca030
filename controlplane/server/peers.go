package server

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// peers bounds what one peer address does before it is authenticated, so
// a client sending garbage cannot keep the token reviews (and the API
// server) busy while real agents wait: at most maxPending of its streams
// are being authenticated at once, and once it has failed authentication
// burst times in a row faster than rate a second, its new streams are
// refused before a handler runs (tap) until the bucket refills. Agents
// rarely fail, so they never see the second limit. Keyed by IP: a port is
// free to change.
type peers struct {
	maxPending int

	mu    sync.Mutex          // guards following
	fails buckets[netip.Addr] // held: streams being authenticated; tokens: failed authentications still allowed
}

// maxPeers bounds the peer addresses remembered; beyond it the ones with
// nothing pending and a full bucket are forgotten (they lose nothing).
const maxPeers = 100_000

// newPeers forgives rate failed authentications a second, up to burst.
func newPeers(maxPending int, burst, rate float64) *peers {
	return &peers{maxPending: maxPending, fails: newBuckets[netip.Addr](burst, rate, maxPeers)}
}

// peerIP is the IP of the stream's peer, or the zero Addr when unknown
// (no limits apply then: a listener that is not TCP).
func peerIP(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return netip.Addr{}
	}
	return addrIP(p.Addr)
}

// addrIP is the IP of addr, or the zero Addr when unknown.
func addrIP(addr net.Addr) netip.Addr {
	if addr == nil {
		return netip.Addr{}
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		a, _ := netip.AddrFromSlice(ta.IP)
		return a.Unmap()
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// blocked reports whether addr has used up its failed authentications.
func (p *peers) blocked(addr netip.Addr, now time.Time) bool {
	if !addr.IsValid() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.fails.lookup(addr, now)
	return st != nil && st.tokens < 1
}

// begin starts an authentication for addr; done reports whether it
// failed (a credential refused or missing: not an API server outage).
// why is "" unless the stream is refused.
func (p *peers) begin(addr netip.Addr, now time.Time) (done func(failed bool, now time.Time), why string) {
	if !addr.IsValid() {
		return func(bool, time.Time) {}, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.fails.get(addr, 1, now)
	switch {
	case st.tokens < 1:
		return nil, "too many failed authentications from this address; back off"
	case st.held >= p.maxPending:
		return nil, "too many streams of this address being authenticated at once; back off"
	}
	st.held++
	return func(failed bool, now time.Time) {
		p.mu.Lock()
		defer p.mu.Unlock()
		st.held--
		if failed {
			p.fails.take(st, now)
		}
	}, ""
}

// tap refuses a new stream of a peer that used up its failed
// authentications, before grpc starts a goroutine for it.
func (s *Server) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	return ctx, s.admitPeerIP(peerIP(ctx))
}

// admitPeer is tap for agentstream's streams.
func (s *Server) admitPeer(remote net.Addr) error {
	return s.admitPeerIP(addrIP(remote))
}

func (s *Server) admitPeerIP(ip netip.Addr) error {
	if s.peers.blocked(ip, s.cfg.Now()) {
		s.m.admissions.WithLabelValues(admitLimited, "none").Inc()
		return status.Error(codes.ResourceExhausted, "too many failed authentications from this address; back off")
	}
	return nil
}
