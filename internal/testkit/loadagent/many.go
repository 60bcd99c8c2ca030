package loadagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"
)

// Fleet describes many agents.
type Fleet struct {
	// Addrs are the control planes; agent i starts at Addrs[i%len].
	Addrs []string
	// Agents is how many; First is the index of the first (so several
	// processes can share one numbering).
	Agents, First int
	// Namespaces spreads the agents: agent i is in ns-<i%Namespaces>.
	Namespaces int
	// Watch is passed to every agent (Config.Watch).
	Watch string
	// Ramp spreads the connects over this long; zero connects at once.
	Ramp time.Duration
	// Sources spreads the agents over this many loopback source addresses
	// (SourceAddr), agent i on the (i mod Sources)th, as agents of
	// distinct pods come from distinct addresses; zero lets the kernel
	// choose (every agent from 127.0.0.1 on loopback).
	Sources int
	// TLS, when set, returns agent i's TLS configuration (Config.TLS).
	TLS func(i int) *tls.Config
}

// SourceAddr is the kth loopback source address: 127.1.0.1 onwards,
// skipping host bytes 0 and 255 so that no address looks like a subnet's
// network or broadcast address.
func SourceAddr(k int) netip.Addr {
	a := k / 254
	return netip.AddrFrom4([4]byte{127, byte(1 + a>>8), byte(a), byte(1 + k%254)})
}

// RunFleet runs the fleet until ctx ends, writing one line per event to w
// (FormatEvent); w is written by one goroutine.
func RunFleet(ctx context.Context, f Fleet, w io.Writer) error {
	if len(f.Addrs) == 0 || f.Agents <= 0 {
		return fmt.Errorf("fleet needs addresses and agents")
	}
	f.Namespaces = max(f.Namespaces, 1)
	events := make(chan Event, 4096)
	var wg sync.WaitGroup
	for k := range f.Agents {
		i := f.First + k
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.Ramp > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(f.Ramp * time.Duration(k) / time.Duration(f.Agents)):
				}
			}
			cfg := Config{
				Addrs: f.Addrs, Namespace: fmt.Sprintf("ns-%d", i%f.Namespaces), Pod: fmt.Sprintf("pod-%d", i),
				Index: i, Watch: f.Watch,
				Report: func(e Event) {
					select {
					case events <- e:
					case <-ctx.Done():
					}
				},
			}
			if f.Sources > 0 {
				cfg.Source = SourceAddr(i % f.Sources)
			}
			if f.TLS != nil {
				cfg.TLS = f.TLS(i)
			}
			_ = Run(ctx, cfg)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	bw := bufio.NewWriterSize(w, 64<<10)
	flush := time.NewTicker(20 * time.Millisecond)
	defer flush.Stop()
	for {
		select {
		case e := <-events:
			if _, err := io.WriteString(bw, FormatEvent(e)); err != nil {
				return err
			}
		case <-flush.C:
			if err := bw.Flush(); err != nil {
				return err
			}
		case <-done:
			return bw.Flush()
		}
	}
}

// FormatEvent renders e as one line: "EV agent kind empty watched unixnano
// bytes version addr\n" (watched and version "-" when empty).
func FormatEvent(e Event) string {
	w := e.Watched
	if w == "" {
		w = "-"
	}
	v := e.Version
	if v == "" {
		v = "-"
	}
	return fmt.Sprintf("EV %d %s %t %s %d %d %s %s\n", e.Agent, e.Kind, e.Empty, w, e.At.UnixNano(), e.Bytes, v, e.Addr)
}
