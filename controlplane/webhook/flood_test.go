package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// servedWebhook is a Webhook served over HTTPS on loopback the way the
// control plane serves it (NewServer, LimitListener).
type servedWebhook struct {
	url    string
	addr   string
	client *tls.Config
	lis    *limitListener
}

func serveWebhook(t *testing.T, h http.Handler, maxConns int) *servedWebhook {
	t.Helper()
	ca := certtest.NewCA(t, "meshdns-flood-ca")
	certPEM, keyPEM := ca.Issue(t, "127.0.0.1", true)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := LimitListener(raw, maxConns).(*limitListener)
	srv := NewServer(h, certtest.ServerTLS(t, certPEM, keyPEM, nil), slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeTLS(lis, "", "")
	}()
	t.Cleanup(func() {
		// Shutdown waits for every connection to close, those the server
		// answered early included (they linger for net/http's reset
		// avoidance), so no server goroutine outlives the test.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shut the webhook server down: %v", err)
		}
		_ = srv.Close()
		<-done
	})
	return &servedWebhook{url: "https://" + raw.Addr().String(), addr: raw.Addr().String(),
		client: certtest.ClientTLS(t, ca, nil, nil), lis: lis}
}

// heapPeak samples the heap in use until stop is called, which returns
// the highest sample.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// slowClient opens a TLS connection, sends the headers of a 4 MB review
// and then one byte of its body every 50ms until ctx ends or the server
// gives up on it.
func slowClient(ctx context.Context, s *servedWebhook, connected *sync.WaitGroup) {
	defer connected.Done()
	c, err := tls.Dial("tcp", s.addr, s.client)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{"); err != nil {
		return
	}
	connected.Done()
	connected.Add(1) // balanced by the deferred Done
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

// TestFlood floods the served webhook with what once took the control
// plane past its 1 GiB limit: concurrent 4 MB reviews of 1.3 million empty
// containers each, and clients that send a review's body a byte at a
// time. Meanwhile the heap in use stays within a bound and ordinary
// reviews are answered, injected, within the API server's default webhook
// timeout (10s).
func TestFlood(t *testing.T) {
	// Within the connection limit, so that the ordinary review's
	// connection is accepted at once: past it, connections wait in the
	// listen backlog (costing no memory) for one to close.
	flooders, slowClients := 80, 40
	if raceEnabled {
		// The clients share the test's process and its instrumented
		// copies: fewer of them, each still sending 4 MB reviews.
		flooders, slowClients = 16, 16
	}
	const (
		normal = 10
		// What the flood may add to the heap in use: the slots' bodies
		// and decoders (1 large body, 4 decisions), 128 KiB per other
		// connection, and garbage not yet collected.
		heapBound = 160 << 20
		timeout   = 10 * time.Second
	)
	w, _ := newTestWebhook(t, Config{})
	s := serveWebhook(t, w, MaxConnections)
	bomb := reviewWith(t, func(r *admissionv1.AdmissionRequest) {
		r.Object.Raw = []byte(`{"spec":{"containers":[` + strings.Repeat(`{},`, 1_300_000) + `{}]}}`)
	})
	plain := reviewWith(t, nil)

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stopSampling := heapPeak()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// HTTP/1.1, a connection per flooder, as a crowd of senders would.
	floodTransport := &http.Transport{TLSClientConfig: s.client.Clone(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost: flooders}
	defer floodTransport.CloseIdleConnections()
	var answered, busy atomic.Int64
	for range flooders {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/inject", bytes.NewReader(bomb))
				req.Header.Set("Content-Type", "application/json")
				resp, err := floodTransport.RoundTrip(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
				if resp.StatusCode == http.StatusServiceUnavailable {
					busy.Add(1)
				}
			}
		})
	}
	var connected sync.WaitGroup
	connected.Add(slowClients)
	for range slowClients {
		wg.Go(func() { slowClient(ctx, s, &connected) })
	}
	connected.Wait()
	// The flood is on once both large slots are taken.
	eventually(t, "large review slots taken", func() bool { return len(w.limits.large) == cap(w.limits.large) })

	// An ordinary review, as the API server sends it (HTTP/2, its own
	// connection).
	apiServer := &http.Client{Transport: &http.Transport{TLSClientConfig: s.client.Clone(), ForceAttemptHTTP2: true}, Timeout: timeout}
	defer apiServer.CloseIdleConnections()
	var slowest time.Duration
	for i := range normal {
		start := time.Now()
		resp, err := apiServer.Post(s.url+"/inject", "application/json", bytes.NewReader(plain))
		if err != nil {
			t.Fatalf("ordinary review %d during the flood: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slowest = max(slowest, time.Since(start))
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"patch"`)) {
			t.Fatalf("ordinary review %d during the flood: status %d, %.200s", i, resp.StatusCode, body)
		}
	}
	cancel()
	wg.Wait()
	peak := stopSampling()
	grew := int64(peak) - int64(base.HeapInuse)
	t.Logf("flood: %d flooders (%d answers, %d busy), %d slow clients; heap in use %d MiB before, peak %d MiB (+%d MiB); slowest ordinary review %v",
		flooders, answered.Load(), busy.Load(), slowClients, base.HeapInuse>>20, peak>>20, grew>>20, slowest)
	if grew > heapBound {
		t.Errorf("the flood grew the heap in use by %d MiB, want at most %d MiB", grew>>20, heapBound>>20)
	}
}

// TestSlowClientsBounded: connections that never finish their TLS
// handshake hold no more goroutines than the connection limit.
func TestSlowClientsBounded(t *testing.T) {
	const limit, clients = 64, 300
	w, _ := newTestWebhook(t, Config{})
	s := serveWebhook(t, w, limit)
	base := runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	eventually(t, "every connection slot taken", func() bool { return len(s.lis.slots) == limit })
	if got := runtime.NumGoroutine() - base; got > limit+8 {
		t.Errorf("%d idle connections hold %d more goroutines, want at most %d (one per connection served)", clients, got, limit+8)
	}
	// They are served as slots free up.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// At rest, Accept holds the slot of the next connection.
	eventually(t, "slots given back", func() bool { return len(s.lis.slots) <= 1 })
}
