package nft

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// roleEnv makes the test binary act as a small UDP or TCP helper inside a
// network namespace (started with ip netns exec, as another user with
// setpriv) instead of running tests.
const roleEnv = "MESHDNS_NFT_TEST_ROLE"

func TestMain(m *testing.M) {
	var code int
	switch os.Getenv(roleEnv) {
	case "":
		code = m.Run()
	case "echo":
		code = echo(os.Getenv("ADDR"), os.Getenv("REPLY"))
	case "send":
		code = send(os.Getenv("NET"), os.Getenv("SRC"), os.Getenv("DST"))
	default:
		fmt.Fprintln(os.Stderr, "unknown role")
		code = 2
	}
	os.Exit(code)
}

// echo answers every UDP datagram and every TCP connection on addr with
// reply, so a sender can tell which listener it reached. It prints "ready"
// once both are bound.
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

// send sends one UDP datagram (or opens one TCP connection) from src to
// dst and prints the reply, or "timeout" after two seconds.
func send(network, src, dst string) int {
	var c net.Conn
	var err error
	if network == "tcp" {
		c, err = net.DialTimeout("tcp", dst, 2*time.Second)
		if err != nil {
			fmt.Println("timeout")
			return 0
		}
	} else {
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
		if c, err = net.DialUDP("udp", la, ra); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := c.Write([]byte("q")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
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
