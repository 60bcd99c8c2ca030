// Package loadagent is a lightweight NameTable agent for load tests: it
// holds a stream to a control plane, ACKs every response and reports what
// it got, without decoding full tables (thousands of agents in one process
// would otherwise measure their own decoding, and need gigabytes). It
// resumes from the last version it applied and, like the real agent, moves
// to the next control plane address when a stream ends.
package loadagent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Event is one applied (and ACKed) response.
type Event struct {
	// Agent is the index of the agent (Config.Index).
	Agent int
	// Addr is the control plane that sent it.
	Addr string
	// Version is the version the response brought the agent to.
	Version string
	// Kind is "full" or "delta"; Empty marks a delta without changes.
	Kind  string
	Empty bool
	// Watched is the first address of Config.Watch in a delta that
	// upserted it, else empty.
	Watched string
	// At is when the response was read.
	At time.Time
	// Bytes is the response's size.
	Bytes int
}

// Config describes one agent.
type Config struct {
	// Addrs are the control planes, tried in turn starting at Index.
	Addrs []string
	// Namespace and Pod name the agent.
	Namespace, Pod string
	// Index identifies the agent in events and picks its first address.
	Index int
	// Version is the version the agent resumes from on its first
	// connect (as a real agent restored from its state file); empty
	// asks for a full table.
	Version string
	// Watch is a hostname whose address deltas report (Event.Watched).
	Watch string
	// MinBackoff is the most a reconnect after a working stream waits (a
	// random part of it), as the real agent does; zero means 250ms.
	MinBackoff time.Duration
	// Report receives every event; it must not block for long.
	Report func(Event)
	// Source is the local address connections are made from (an address
	// of 127.0.0.0/8 on loopback, so that each agent is a peer of its own
	// as a pod is); the zero Addr lets the kernel choose.
	Source netip.Addr
	// TLS, when set, dials with it (mTLS when it holds a certificate);
	// nil dials plaintext.
	TLS *tls.Config
}

// Run keeps a stream open until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	version := cfg.Version
	fails := 0
	for i := cfg.Index; ; i++ {
		addr := cfg.Addrs[i%len(cfg.Addrs)]
		got, err := session(ctx, cfg, addr, &version)
		if ctx.Err() != nil {
			return nil
		}
		wait := time.Duration(rand.Int64N(int64(cfg.MinBackoff) + 1))
		if got {
			fails = 0
		} else {
			fails++
			wait = min(cfg.MinBackoff<<min(fails, 5), 5*time.Second)
			wait = wait/2 + time.Duration(rand.Int64N(int64(wait/2)+1))
		}
		_ = err // a failed stream is retried; the caller sees the events
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// window is the agent's static HTTP/2 stream and connection window.
const window = 4 << 20

// session runs one stream; got reports whether it delivered a response.
func session(ctx context.Context, cfg Config, addr string, version *string) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := dial(sctx, addr, cfg.Source, cfg.TLS, meshdnsv1.NameDiscoveryService_StreamNameTable_FullMethodName)
	if err != nil {
		return false, fmt.Errorf("open stream %s: %w", addr, err)
	}
	defer st.close()
	if err := st.send(&namewire.Request{
		Identity:    &namewire.AgentIdentity{PodName: cfg.Pod, Namespace: cfg.Namespace},
		VersionInfo: *version,
	}); err != nil {
		return false, fmt.Errorf("send identity: %w", err)
	}
	for {
		msg, err := st.recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return got, err
		}
		r, err := readResponse(msg)
		if err != nil {
			return got, err
		}
		got = true
		at := time.Now()
		*version = r.version
		if err := st.send(&namewire.Request{VersionInfo: r.version, ResponseNonce: r.nonce}); err != nil {
			return got, err
		}
		ev, err := event(cfg, addr, &r, at)
		if err != nil {
			return got, err
		}
		cfg.Report(ev)
	}
}

// event is the Event of r, read from addr at at.
func event(cfg Config, addr string, r *response, at time.Time) (Event, error) {
	ev := Event{Agent: cfg.Index, Addr: addr, Version: r.version, Kind: r.kind, At: at, Bytes: r.size}
	if r.delta == nil {
		return ev, nil
	}
	ev.Empty = deltaEmpty(r.delta)
	var err error
	if cfg.Watch != "" {
		ev.Watched, err = watched(r.delta, cfg.Watch)
	}
	return ev, err
}

// response is what the codec keeps of a StreamNameTableResponse: its
// version and nonce, its kind and its delta (small), never a full table.
type response struct {
	version, nonce, kind string
	delta                *namewire.Delta // or nil
	size                 int
}

// readResponse reads msg with the agent's reader (internal/namewire), a
// full table skipped as it is read.
func readResponse(msg []byte) (response, error) {
	br := readers.Get().(*bufio.Reader)
	br.Reset(bytes.NewReader(msg))
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	got, err := namewire.ReadResponse(br, discard)
	if err != nil {
		return response{}, err
	}
	r := response{version: got.Version, nonce: got.Nonce, delta: got.Delta, size: len(msg)}
	switch {
	case got.IsFull:
		r.kind = "full"
	case got.Delta != nil:
		r.kind = "delta"
	}
	return r, nil
}

// readers are the buffers responses are read through: ReadResponse reads
// through a reader of its buffer size as it is, and a buffer per response
// would be most of what thousands of agents allocate.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBuffer) }}

// readBuffer is ReadResponse's buffer size.
const readBuffer = 32 << 10

// discard is the spool of a full table: the table is read, field by
// field, into nothing.
func discard(_ string, _ int, copy func(io.Writer) (*namewire.Shape, error)) (func(), error) {
	if _, err := copy(io.Discard); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// deltaEmpty reports whether d changes nothing (it holds only its base
// version).
func deltaEmpty(d *namewire.Delta) bool {
	return len(d.Upserted) == 0 && len(d.Removed) == 0 && d.AuthoritativeZones == nil && d.Settings == nil
}

// watched returns the first address of host when d upserts it, else "".
func watched(d *namewire.Delta, host string) (string, error) {
	for _, u := range d.Upserted {
		if u.Host != host {
			continue
		}
		var info namewire.NameInfo
		if err := info.Unmarshal(u.Info); err != nil {
			return "", fmt.Errorf("decode delta: %w", err)
		}
		if len(info.IPs) > 0 {
			return info.IPs[0], nil
		}
	}
	return "", nil
}
