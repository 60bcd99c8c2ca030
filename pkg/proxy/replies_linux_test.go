package proxy

import (
	"os"
	"strconv"
	"strings"
	"testing"

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
