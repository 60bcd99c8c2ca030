package agent

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A part that fails to open closes those opened before it in reverse
// order, once; Run primes in order, and a prime that fails ends the parts
// already running and returns its error.
func TestPartsUnwind(t *testing.T) {
	var events []string
	errBoom := errors.New("boom")
	mk := func(name string, openErr error) part {
		return part{
			name:  name,
			open:  func() error { events = append(events, "open "+name); return openErr },
			close: func() error { events = append(events, "close "+name); return nil },
		}
	}
	ps := []part{mk("resolver", nil), {name: "helper"}, mk("server", nil), mk("admin", errBoom), mk("probes", nil)}
	opened, err := openParts(ps)
	if !errors.Is(err, errBoom) || opened != nil {
		t.Fatalf("openParts = %v, %d parts opened; want boom and none", err, len(opened))
	}
	want := []string{"open resolver", "open server", "open admin", "close server", "close resolver"}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got)\n%s", diff)
	}

	events = nil
	stopped := make(chan struct{})
	run := []part{
		{name: "memory", run: func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }},
		{name: "source", prime: func() error { events = append(events, "prime source"); return errBoom }},
		{name: "dns", prime: func() error { events = append(events, "prime dns"); return nil }},
	}
	if err := runParts(context.Background(), run); !errors.Is(err, errBoom) {
		t.Fatalf("runParts = %v, want boom", err)
	}
	<-stopped // the part already running was ended
	if diff := cmp.Diff([]string{"prime source"}, events); diff != "" {
		t.Errorf("primes (-want +got)\n%s", diff)
	}
}

// Listen failing at its last socket frees the DNS and admin sockets it
// opened before: a retry, or the next agent, can bind them.
func TestListenUnwindsSockets(t *testing.T) {
	up := startUpstream(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	a, err := New(Config{Upstreams: []string{up.addr}, DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "127.0.0.1:0",
		ProbeAddr: taken.Addr().String(), ResolvConf: writeFile(t, t.TempDir(), "resolv.conf", "nameserver 127.0.0.1\n"),
		Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err == nil || !strings.HasPrefix(err.Error(), "probes: ") {
		t.Fatalf("Listen = %v, want the probe port's error", err)
	}
	dnsAddr, adminAddr := a.DNSAddr(), a.AdminAddr()
	if dnsAddr == nil || adminAddr == nil {
		t.Fatalf("DNS %v, admin %v: want both opened before the probes", dnsAddr, adminAddr)
	}
	pc, err := net.ListenPacket("udp", dnsAddr.String())
	if err != nil {
		t.Fatalf("DNS socket still bound after a failed Listen: %v", err)
	}
	pc.Close()
	l, err := net.Listen("tcp", adminAddr.String())
	if err != nil {
		t.Fatalf("admin port still bound after a failed Listen: %v", err)
	}
	l.Close()
	if err := a.Close(); err != nil {
		t.Errorf("Close after a failed Listen: %v", err)
	}
}
