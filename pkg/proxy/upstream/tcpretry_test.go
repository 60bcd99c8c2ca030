package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// truncThenFail runs a server on 127.0.0.1 that truncates every UDP reply
// (TC, question only) and fails the TCP retry as mode says: "close" at
// once, "length" after reading the length prefix, "partial" after six
// bytes of a reply.
func truncThenFail(t testing.TB, mode string) string {
	t.Helper()
	truncate := func(req []byte) [][]byte {
		m := new(dns.Msg)
		if m.Unpack(req) != nil {
			return nil
		}
		r := new(dns.Msg)
		r.SetReply(m)
		r.Truncated = true
		b, err := r.Pack()
		if err != nil {
			return nil
		}
		return [][]byte{b}
	}
	// The kernel picks the UDP port; TCP on the same port may be taken,
	// so try a few times (as newServer does).
	var (
		srv *server
		ln  net.Listener
		err error
	)
	for range 10 {
		srv = rawServer(t, truncate)
		if ln, err = net.Listen("tcp", srv.Addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				var l [2]byte
				if mode == "close" {
					return
				}
				if _, err := io.ReadFull(c, l[:]); err != nil || mode == "length" {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err == nil {
					_, _ = c.Write([]byte{0, 60, q[0], q[1], 0x81, 0x80})
				}
			})
		}
	})
	return srv.Addr
}

// TestTruncatedTCPRetryFails: a TCP retry the upstream cuts short fails
// its try at once (counted as a network error), the next try goes out
// without waiting for Timeout, and the question fails with
// ErrUpstreamFailed (the proxy's SERVFAIL) long before the window ends.
func TestTruncatedTCPRetryFails(t *testing.T) {
	for _, mode := range []string{"close", "length", "partial"} {
		t.Run(mode, func(t *testing.T) {
			addr := truncThenFail(t, mode)
			r, _ := newTestResolver(t, Config{Upstreams: []string{addr}, Timeout: 20 * time.Second})
			start := time.Now()
			_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "tc.example.", dns.TypeA))
			if !errors.Is(err, ErrUpstreamFailed) {
				t.Fatalf("err %v, want ErrUpstreamFailed", err)
			}
			// Both tries failed on their own: waiting for the second try's
			// turn (Timeout) or the window would take 20s and more.
			if d := time.Since(start); d >= 20*time.Second {
				t.Errorf("failed after %v: a try waited for its Timeout", d)
			}
			for kind, want := range map[string]float64{kindTruncated: 2, kindNetwork: 2, kindTimeout: 0} {
				if got := errCount(r, 0, kind); got != want {
					t.Errorf("%s errors %v, want %v", kind, got, want)
				}
			}
		})
	}
}
