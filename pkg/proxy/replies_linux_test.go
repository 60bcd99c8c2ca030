package proxy

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// TestUDPReadBuffer: each UDP socket asks for a queue of udpReadBuffer, so
// a reader that stalls for a moment loses nothing; the kernel grants
// twice what is asked, up to twice net.core.rmem_max.
func TestUDPReadBuffer(t *testing.T) {
	want := 2 * udpReadBuffer
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatalf("read rmem_max: %v", err)
	}
	if max, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		t.Fatalf("rmem_max %q: %v", b, err)
	} else if 2*max < want {
		want = 2 * max
	}
	s := startServer(t, testConfig(&fakeResolver{}))
	for _, c := range s.udp {
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || gerr != nil {
			t.Fatalf("SO_RCVBUF: %v %v", err, gerr)
		}
		if got < want {
			t.Errorf("%s: receive queue %d bytes, want at least %d", c.LocalAddr(), got, want)
		}
	}
}

// A forwarding worker's reply (sendto on the reader's socket) reaches an
// IPv4 and an IPv6 client, from a socket of either family.
func TestForwardedReplySentDirectly(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			if ln, err := net.ListenPacket("udp", addr); err != nil {
				if os.Getenv("CI") == "" {
					t.Skipf("no %s: %v", addr, err)
				}
				t.Fatalf("listen %s: %v", addr, err)
			} else {
				ln.Close()
			}
			res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}
			cfg := testConfig(res)
			cfg.Addrs = []string{addr}
			s := startServer(t, cfg)
			r := exchange(t, "udp", udpAddr(s), newQuery("forwarded.example.", dns.TypeA))
			if got := rrStrings(r.Answer); len(got) != 1 || !strings.HasSuffix(got[0], "192.0.2.1") || res.calls.Load() != 1 {
				t.Errorf("answer %v after %d Resolver calls, want the forwarded A after one", got, res.calls.Load())
			}
		})
	}
}

func TestSockaddr(t *testing.T) {
	tests := []struct {
		name    string
		addr    netip.AddrPort
		wantLen uint32
		wantOK  bool
		family  uint16
		scope   uint32
	}{
		{name: "IPv4", addr: netip.MustParseAddrPort("127.0.0.1:53"), wantLen: unix.SizeofSockaddrInet4, wantOK: true, family: unix.AF_INET},
		{name: "IPv6", addr: netip.MustParseAddrPort("[::1]:53"), wantLen: unix.SizeofSockaddrInet6, wantOK: true, family: unix.AF_INET6},
		{name: "mapped IPv4 as from an IPv6 socket", addr: netip.MustParseAddrPort("[::ffff:127.0.0.1]:53"), wantLen: unix.SizeofSockaddrInet6, wantOK: true, family: unix.AF_INET6},
		{name: "numeric zone", addr: netip.MustParseAddrPort("[fe80::1%7]:53"), wantLen: unix.SizeofSockaddrInet6, wantOK: true, family: unix.AF_INET6, scope: 7},
		{name: "zone by name", addr: netip.MustParseAddrPort("[fe80::1%eth0]:53"), wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sa unix.RawSockaddrInet6
			n, ok := sockaddr(&sa, tc.addr)
			if ok != tc.wantOK || (ok && n != tc.wantLen) {
				t.Fatalf("sockaddr = %d, %v; want %d, %v", n, ok, tc.wantLen, tc.wantOK)
			}
			if !ok {
				return
			}
			port := uint16(sa.Port&0xff)<<8 | sa.Port>>8 // network byte order
			if sa.Family != tc.family || port != 53 || (tc.family == unix.AF_INET6 && sa.Scope_id != tc.scope) {
				t.Errorf("family %d port %d scope %d, want %d 53 %d", sa.Family, port, sa.Scope_id, tc.family, tc.scope)
			}
		})
	}
}
