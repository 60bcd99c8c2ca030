package netnstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RoleEnv makes a test binary whose TestMain calls Role play a helper
// instead of running tests: tests start copies of themselves inside
// namespaces (and as other users with setpriv), so the helpers need no
// build step of their own.
const RoleEnv = "MESHDNS_NETNSTEST_ROLE"

// Role runs the helper this process was started as by StartEcho or Send
// and returns its exit code and true, or returns false when the process
// is to run tests:
//
//	func TestMain(m *testing.M) {
//		if code, ok := netnstest.Role(); ok {
//			os.Exit(code)
//		}
//		os.Exit(m.Run())
//	}
func Role() (int, bool) {
	switch os.Getenv(RoleEnv) {
	case "":
		return 0, false
	case "echo":
		return echo(os.Getenv("ADDR"), os.Getenv("REPLY")), true
	case "send":
		return send(os.Getenv("NET"), os.Getenv("SRC"), os.Getenv("DST")), true
	}
	fmt.Fprintf(os.Stderr, "unknown %s %q\n", RoleEnv, os.Getenv(RoleEnv))
	return 2, true
}

// StartEcho runs the test binary self in netns, as the user as says
// (setpriv arguments; nil: root), answering every UDP datagram and TCP
// connection to addr with reply until the test ends, so a sender can tell
// which listener it reached. It returns once both are bound.
func StartEcho(t testing.TB, self, netns string, as []string, addr, reply string) {
	t.Helper()
	argv := append(append([]string{"ip", "netns", "exec", netns}, as...), self)
	Start(t, []string{RoleEnv + "=echo", "ADDR=" + addr, "REPLY=" + reply}, argv...)
}

// Send runs the test binary self in netns, as the user as says, to send
// one UDP datagram from src to dst (or open one TCP connection to dst),
// and returns the reply, or "timeout" after two seconds. With network
// "udp" the socket is connected, as a stub resolver's is: it drops a reply
// from any address but dst, so a reply that conntrack did not translate
// back is a timeout. With "udp-any" it is not, and takes a reply from any
// address: for tests that ask which listener a datagram reached, whatever
// the reply's source.
func Send(ctx context.Context, t testing.TB, self, netns string, as []string, network, src, dst string) string {
	t.Helper()
	argv := append(append([]string{"netns", "exec", netns}, as...), self)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Env = append(os.Environ(), RoleEnv+"=send", "NET="+network, "SRC="+src, "DST="+dst)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("send %s %s -> %s in %s: %v: %s", network, src, dst, netns, err, out)
	}
	return strings.TrimSpace(string(out))
}

// echo is the echo role. It prints "ready" once both listeners are bound.
func echo(addr, reply string) int {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(reply))
			_ = c.Close()
		}
	}()
	fmt.Println("ready")
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return 1
		}
		_, _ = pc.WriteTo([]byte(reply), from)
	}
}

// send is the send role: it prints the reply, or "timeout".
func send(network, src, dst string) int {
	var c interface {
		Read([]byte) (int, error)
		SetReadDeadline(time.Time) error
		Close() error
	}
	if network == "tcp" {
		tc, err := net.DialTimeout("tcp", dst, 2*time.Second)
		if err != nil {
			fmt.Println("timeout")
			return 0
		}
		c = tc
	} else {
		uc, err := sendUDP(network, src, dst)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c = uc
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		fmt.Println("timeout")
		return 0
	}
	fmt.Println(string(buf[:n]))
	return 0
}

// sendUDP sends the datagram from src to dst and returns the socket to
// read the reply from: connected for "udp", unconnected (Read takes a
// datagram from any address) for "udp-any".
func sendUDP(network, src, dst string) (*net.UDPConn, error) {
	la, err := net.ResolveUDPAddr("udp", src)
	if err != nil {
		return nil, err
	}
	ra, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		return nil, err
	}
	var c *net.UDPConn
	if network == "udp-any" {
		if c, err = net.ListenUDP("udp", la); err == nil {
			_, err = c.WriteTo([]byte("q"), ra)
		}
	} else if c, err = net.DialUDP("udp", la, ra); err == nil {
		_, err = c.Write([]byte("q"))
	}
	if err != nil && c != nil {
		c.Close()
	}
	return c, err
}

// As is the command prefix that runs a program as uid, with the same gid
// and no supplementary groups (setpriv(1)): for StartEcho and Send as the
// agent's user.
func As(uid int) []string {
	id := fmt.Sprint(uid)
	return []string{"setpriv", "--reuid", id, "--regid", id, "--clear-groups"}
}
