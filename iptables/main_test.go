package iptables

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// roleEnv makes the test binary act as a small UDP helper instead of
// running tests, so the race test can start processes inside network
// namespaces and as other users with only ip netns exec and setpriv.
const roleEnv = "MESHDNS_IPTABLES_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "udpecho":
		os.Exit(udpEcho(os.Getenv("ADDR"), os.Getenv("REPLY")))
	case "udpsend":
		os.Exit(udpSend(os.Getenv("SRC"), os.Getenv("DST")))
	}
	fmt.Fprintln(os.Stderr, "unknown role")
	os.Exit(2)
}

// udpEcho answers every datagram on addr with reply, so a sender can tell
// which listener its packet reached. It prints "ready" once bound.
func udpEcho(addr, reply string) int {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	buf := make([]byte, 512)
	for {
		_, from, err := c.ReadFrom(buf)
		if err != nil {
			return 1
		}
		_, _ = c.WriteTo([]byte(reply), from)
	}
}

// udpSend sends one datagram from src to dst and prints the reply, or
// "timeout" after two seconds.
func udpSend(src, dst string) int {
	la, err := net.ResolveUDPAddr("udp", src)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ra, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := net.ListenUDP("udp", la)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if _, err := c.WriteTo([]byte("q"), ra); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		fmt.Println("timeout")
		return 0
	}
	fmt.Println(string(buf[:n]))
	return 0
}
