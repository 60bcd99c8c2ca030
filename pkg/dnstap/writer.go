package dnstap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// Config configures a Writer. Every zero value but Address has a default.
type Config struct {
	// Address of the collector: unix:///path/to/socket or tcp://host:port.
	// Required.
	Address string
	// QueueSize bounds the frames waiting to be written; a frame sent
	// while it is full is dropped (and counted). Zero means 1024: about
	// 0.5 MiB of frames at most.
	QueueSize int
	// Timeout bounds dialling, the handshake and each write; a collector
	// slower than that is disconnected and dialled again. Zero means 5s.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before dialling again after
	// a failure; it doubles from the first to the second, with jitter.
	// Zero means 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives connection changes; nil means discard.
	Logger *slog.Logger
}

// Stats are a Writer's counters since New.
type Stats struct {
	// Sent counts frames written to a collector.
	Sent uint64
	// QueueFull counts frames dropped because the queue was full (the
	// collector slow or gone); WriteFailed frames lost in a failed write.
	QueueFull, WriteFailed uint64
	// Connects counts handshakes done, ConnectErrors dials or handshakes
	// that failed.
	Connects, ConnectErrors uint64
	// Connected reports a collector connected now.
	Connected bool
}

// Writer sends dnstap frames to one collector. Send is safe for
// concurrent use and never blocks; Run does the I/O.
type Writer struct {
	cfg             Config
	network, target string
	log             *slog.Logger
	queue           chan []byte

	sent, queueFull, writeFailed, connects, connectErrors atomic.Uint64
	connected                                             atomic.Bool
}

// ParseAddress splits a collector address, unix:///path or
// tcp://host:port, into a network and an address for net.Dial.
func ParseAddress(s string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(s, "unix://"):
		network, address = "unix", strings.TrimPrefix(s, "unix://")
		if address == "" {
			return "", "", fmt.Errorf("dnstap address %q: no socket path", s)
		}
	case strings.HasPrefix(s, "tcp://"):
		network, address = "tcp", strings.TrimPrefix(s, "tcp://")
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", "", fmt.Errorf("dnstap address %q: %w", s, err)
		}
	default:
		return "", "", fmt.Errorf("dnstap address %q: want unix:///path or tcp://host:port", s)
	}
	return network, address, nil
}

// New checks cfg; it does no I/O.
func New(cfg Config) (*Writer, error) {
	network, target, err := ParseAddress(cfg.Address)
	if err != nil {
		return nil, err
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{cfg: cfg, network: network, target: target, log: log.With("dnstap", cfg.Address),
		queue: make(chan []byte, cfg.QueueSize)}, nil
}

// Send queues one frame's payload (AppendPayload's output), which the
// Writer owns from then on. It reports false, and counts the frame
// dropped, when the queue is full.
func (w *Writer) Send(payload []byte) bool {
	select {
	case w.queue <- payload:
		return true
	default:
		w.queueFull.Add(1)
		return false
	}
}

// Stats returns the counters.
func (w *Writer) Stats() Stats {
	return Stats{
		Sent: w.sent.Load(), QueueFull: w.queueFull.Load(), WriteFailed: w.writeFailed.Load(),
		Connects: w.connects.Load(), ConnectErrors: w.connectErrors.Load(), Connected: w.connected.Load(),
	}
}

// Run connects to the collector and writes the queued frames until ctx
// ends, dialling again after every failure; then it ends the stream (STOP,
// the collector's FINISH, within Timeout) and returns nil.
func (w *Writer) Run(ctx context.Context) error {
	backoff := w.cfg.MinBackoff
	failing := false
	for ctx.Err() == nil {
		conn, err := w.connect(ctx)
		if err != nil {
			w.connectErrors.Add(1)
			if !failing && ctx.Err() == nil {
				w.log.Warn("dnstap collector unreachable; frames wait in the queue, dropped when it is full", "err", err)
			}
			failing = true
			// Jitter over the upper half, so agents restarted together
			// do not dial in step.
			wait := backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, w.cfg.MaxBackoff)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		w.connects.Add(1)
		w.connected.Store(true)
		w.log.Info("dnstap collector connected")
		failing, backoff = false, w.cfg.MinBackoff
		err = w.pump(ctx, conn)
		w.connected.Store(false)
		if err != nil {
			w.log.Warn("dnstap collector lost", "err", err)
		}
	}
	return nil
}

// connect dials the collector and shakes hands, within Timeout.
func (w *Writer) connect(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: w.cfg.Timeout}
	conn, err := d.DialContext(ctx, w.network, w.target)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(w.cfg.Timeout))
	if err := handshake(conn); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// pump writes queued frames to conn, flushing whenever the queue is
// empty, until ctx ends (then it stops the stream cleanly), a write fails
// or the collector closes its side. It closes conn.
func (w *Writer) pump(ctx context.Context, conn net.Conn) error {
	defer conn.Close()
	// The collector sends nothing after ACCEPT but FINISH (after our
	// STOP); reading tells at once when it goes away, even while there
	// is nothing to write.
	peer := make(chan error, 1)
	go func() {
		typ, _, err := readControl(conn)
		if err == nil && typ != controlFinish {
			err = fmt.Errorf("unexpected control type %d: %w", typ, errBadControl)
		}
		peer <- err
	}()
	bw := bufio.NewWriterSize(conn, 16<<10)
	var hdr [4]byte
	pending := uint64(0) // frames in bw, not yet flushed
	fail := func(err error) error {
		w.writeFailed.Add(pending)
		return err
	}
	for {
		var p []byte
		select {
		case p = <-w.queue:
		default:
			if pending > 0 {
				_ = conn.SetWriteDeadline(time.Now().Add(w.cfg.Timeout))
				if err := bw.Flush(); err != nil {
					return fail(fmt.Errorf("write: %w", err))
				}
				w.sent.Add(pending)
				pending = 0
			}
			select {
			case p = <-w.queue:
			case err := <-peer:
				if err == nil {
					err = errors.New("collector finished the stream")
				}
				return fmt.Errorf("collector closed: %w", err)
			case <-ctx.Done():
				w.stop(conn, peer)
				return nil
			}
		}
		_ = conn.SetWriteDeadline(time.Now().Add(w.cfg.Timeout))
		binary.BigEndian.PutUint32(hdr[:], uint32(len(p)))
		if _, err := bw.Write(hdr[:]); err != nil {
			pending++
			return fail(fmt.Errorf("write: %w", err))
		}
		if _, err := bw.Write(p); err != nil {
			pending++
			return fail(fmt.Errorf("write: %w", err))
		}
		pending++
	}
}

// stop ends the stream: STOP, then the collector's FINISH, within Timeout.
func (w *Writer) stop(conn net.Conn, peer <-chan error) {
	_ = conn.SetDeadline(time.Now().Add(w.cfg.Timeout))
	if _, err := conn.Write(appendControl(nil, controlStop)); err != nil {
		return
	}
	<-peer // FINISH, or the deadline's error
}
