// Package loadagent is a lightweight NameTable agent for load tests: it
// holds a stream to a control plane, ACKs every response and reports what
// it got, without decoding full tables (thousands of agents in one process
// would otherwise measure their own decoding, and need gigabytes). It
// resumes from the last version it applied and, like the real agent, moves
// to the next control plane address when a stream ends.
package loadagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20)),
		// As the agent dials: static windows, no BDP pings.
		grpc.WithStaticStreamWindowSize(window), grpc.WithStaticConnWindowSize(window),
	}
	if cfg.Source.IsValid() {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(cfg.Source, 0))}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(sctx)
	if err != nil {
		return false, fmt.Errorf("open stream %s: %w", addr, err)
	}
	if err := st.Send(&meshdnsv1.StreamNameTableRequest{
		Identity:    &meshdnsv1.AgentIdentity{PodName: cfg.Pod, Namespace: cfg.Namespace},
		VersionInfo: *version,
	}); err != nil {
		return false, fmt.Errorf("send identity: %w", err)
	}
	for {
		var r response
		if err := st.RecvMsg(&r); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return got, err
		}
		got = true
		at := time.Now()
		*version = r.version
		if err := st.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: r.version, ResponseNonce: r.nonce}); err != nil {
			return got, err
		}
		ev := Event{Agent: cfg.Index, Addr: addr, Version: r.version, Kind: r.kind, Empty: r.empty, At: at, Bytes: r.size}
		if r.delta != nil && cfg.Watch != "" {
			d := &meshdnsv1.NameTableDelta{}
			if err := proto.Unmarshal(r.delta, d); err != nil {
				return got, fmt.Errorf("decode delta: %w", err)
			}
			if ni, ok := d.GetUpserted()[cfg.Watch]; ok && len(ni.GetIps()) > 0 {
				ev.Watched = ni.GetIps()[0]
			}
		}
		cfg.Report(ev)
	}
}

// response is what the codec keeps of a StreamNameTableResponse: its
// top-level fields, the delta's bytes (small), never a full table's.
type response struct {
	version, nonce, kind string
	empty                bool
	delta                []byte
	size                 int
}

// rawCodec marshals requests with proto and reads responses field by
// field from gRPC's buffers.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r := v.(*response)
	r.size = data.Len()
	rd := data.Reader()
	defer rd.Close()
	for {
		tag, err := readVarint(rd)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d: unexpected wire type %d", num, typ)
		}
		n, err := readVarint(rd)
		if err != nil {
			return err
		}
		switch num {
		case 3: // full
			r.kind = "full"
			if m, err := rd.Discard(int(n)); err != nil || m != int(n) {
				return fmt.Errorf("short full table: %w", io.ErrUnexpectedEOF)
			}
			continue
		case 4: // delta
			r.kind = "delta"
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(rd, b); err != nil {
			return err
		}
		switch num {
		case namewire.FieldResponseVersion:
			r.version = string(b)
		case namewire.FieldResponseNonce:
			r.nonce = string(b)
		case namewire.FieldResponseDelta:
			r.delta = b
			r.empty = deltaEmpty(b)
		}
	}
}

func (rawCodec) Name() string { return "proto" }

// deltaEmpty reports whether a NameTableDelta holds only its base version.
func deltaEmpty(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		if num != namewire.FieldDeltaBase {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}

func readVarint(r io.ByteReader) (uint64, error) {
	var x uint64
	for s := uint(0); s < 64; s += 7 {
		c, err := r.ReadByte()
		if err != nil {
			if s > 0 && errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		x |= uint64(c&0x7f) << s
		if c < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("varint overflows 64 bits")
}
