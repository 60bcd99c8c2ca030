package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// The hop's delay is a UDP relay in the cluster DNS namespace rather than
// tc netem on the veth: the kernels this runs on (CI's among them) may lack
// sch_netem, and a relay needs nothing but a socket. It holds each query
// delay before passing it to CoreDNS and each answer delay before sending
// it back, as a hop with delay each way would.
const coreDNSAddr = "127.0.0.1:1053"

// relayMain is `ndotsbench relay LISTEN UPSTREAM DELAY`, run by
// startRelay inside the cluster DNS namespace.
func relayMain(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: relay LISTEN UPSTREAM DELAY")
	}
	delay, err := time.ParseDuration(args[2])
	if err != nil {
		return fmt.Errorf("relay delay: %w", err)
	}
	pc, err := net.ListenPacket("udp", args[0])
	if err != nil {
		return fmt.Errorf("relay listen: %w", err)
	}
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("relay read: %w", err)
		}
		go relayOne(pc, from, append([]byte(nil), buf[:n]...), args[1], delay)
	}
}

// relayOne passes one query to upstream on a socket of its own, so the
// answer that comes back on it is this query's.
func relayOne(pc net.PacketConn, from net.Addr, query []byte, upstream string, delay time.Duration) {
	time.Sleep(delay)
	c, err := net.Dial("udp", upstream)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(query); err != nil {
		return
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	time.Sleep(delay)
	_, _ = pc.WriteTo(buf[:n], from)
}

// relay is the running relay process.
type relay struct{ cmd *exec.Cmd }

// startRelay runs this program's relay in the DNS namespace on
// dnsIP:53 and waits until it listens.
func startRelay(ctx context.Context, tp topology, delay string) (*relay, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	argv := tp.inDNS(self, "relay", dnsIP+":53", coreDNSAddr, delay)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay: %w", err)
	}
	r := &relay{cmd: cmd}
	// Listening shows as the UDP socket in the namespace's table.
	probe := tp.inDNS("ss", "-Hlun", "sport", "= :53")
	for {
		out, _ := exec.CommandContext(ctx, probe[0], probe[1:]...).Output()
		if len(out) > 0 {
			return r, nil
		}
		select {
		case <-ctx.Done():
			r.stop()
			return nil, fmt.Errorf("relay not listening: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *relay) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}
