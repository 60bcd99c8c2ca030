package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/meshdns/meshdns/internal/grpcstream"
	"github.com/meshdns/meshdns/internal/namewire"
)

// streamMethod is NameDiscoveryService.StreamNameTable, a bidirectional
// stream (proto/meshdns/v1/discovery.proto).
const streamMethod = "/meshdns.v1.NameDiscoveryService/StreamNameTable"

// session runs one stream to addr until it fails or ctx ends. got reports
// whether the stream delivered at least one response: only then was the
// control plane really there, and the backoff starts over.
func (c *Client) session(ctx context.Context, addr string) (got bool, err error) {
	conn, md, err := c.dial(addr)
	if err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, err
	}
	defer conn.Close()
	stream, version, err := c.open(ctx, conn, md, addr)
	if err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, err
	}
	defer stream.Close()
	c.metrics.connects.WithLabelValues("ok").Inc()
	defer c.connected(addr)()
	c.log.Info("control plane stream open", "addr", addr, "version", version)
	defer c.startReports(ctx, stream)()
	return c.receive(stream, addr)
}

// open opens the stream on conn and sends its first request; it returns
// the stream and the version that request says the agent holds.
func (c *Client) open(ctx context.Context, conn *grpcstream.Client, md http.Header, addr string) (*grpcstream.Stream, string, error) {
	stream, err := conn.Open(ctx, streamMethod, md)
	if err != nil {
		// A refused address fails at once, a dead one within
		// ConnectTimeout, so the next one is tried.
		return nil, "", fmt.Errorf("connect %s: %w", addr, err)
	}
	version, _ := c.current()
	if err := stream.Send(c.firstRequest(version).Append(nil)); err != nil {
		stream.Close()
		return nil, "", fmt.Errorf("send identity to %s: %w", addr, err)
	}
	return stream, version, nil
}

// firstRequest is a stream's first request: the agent's identity, the
// version it holds, and the version it rejected, if any.
func (c *Client) firstRequest(version string) *namewire.Request {
	first := &namewire.Request{
		Identity: &namewire.AgentIdentity{
			PodName:       c.cfg.PodName,
			Namespace:     c.cfg.Namespace,
			ClusterDomain: c.cfg.ClusterDomain,
			InstanceID:    c.cfg.InstanceID,
			AgentVersion:  c.cfg.AgentVersion,
			Features:      c.cfg.Features,
		},
		VersionInfo: version,
	}
	if r := c.prob.rejectedVersion(); r.Version != "" {
		// Every stream says so until the control plane moves on: the
		// replica it reaches may not have seen it yet.
		first.RejectedVersion = r.Version
		first.ErrorDetail = &namewire.ErrorDetail{Code: int32(grpcstream.Aborted), Message: r.Message}
	}
	return first
}

// connected notes the stream to addr open, and returns what notes it
// closed.
func (c *Client) connected(addr string) (closed func()) {
	c.metrics.connected.Set(1)
	c.mu.Lock()
	c.addr = addr
	c.mu.Unlock()
	return func() {
		c.metrics.connected.Set(0)
		c.mu.Lock()
		c.addr = ""
		c.mu.Unlock()
	}
}

// receive reads the responses of the stream from addr and answers each
// until the stream fails. got reports whether one arrived.
func (c *Client) receive(stream *grpcstream.Stream, addr string) (got bool, err error) {
	var ack []byte
	for {
		// The response as a reader straight off the connection: a full
		// table is streamed to the state dir (or copied once into
		// memory), never buffered whole by the transport.
		msg, _, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got, fmt.Errorf("receive from %s: the control plane ended the stream", addr)
		}
		if err != nil {
			return got, fmt.Errorf("receive from %s: %w", addr, err)
		}
		got = true
		resp, err := c.read(msg)
		if err != nil {
			return got, fmt.Errorf("read response from %s: %w", addr, err)
		}
		answer := c.handle(resp)
		if answer.ErrorDetail == nil {
			answer.Failing = c.dueReport() // nil unless the report's window ended
		}
		ack = answer.Append(ack[:0])
		if err := stream.Send(ack); err != nil {
			return got, fmt.Errorf("send ack to %s: %w", addr, err)
		}
		c.answered(answer)
	}
}

// read reads one response off the stream, a full table into the state
// dir, or into memory once a write there failed.
func (c *Client) read(msg io.Reader) (*response, error) {
	stateDir := c.cfg.StateDir
	if c.memReceive.Load() {
		stateDir = ""
	}
	resp, err := readResponse(msg, stateDir)
	if errors.Is(err, errStateWrite) {
		// The stream is cut mid-message: from now on full tables
		// are received into memory (and written as before, which
		// falls back to memory when that fails too).
		c.memReceive.Store(true)
		c.stateFailed(err)
	}
	return resp, err
}

// dial returns a client of the control plane at addr, with the TLS files
// and the token as they are now, and the stream's metadata.
func (c *Client) dial(addr string) (*grpcstream.Client, http.Header, error) {
	tlsConf, err := c.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	var md http.Header
	if c.cfg.TokenFile != "" {
		tok, err := readToken(c.cfg.TokenFile)
		if err != nil {
			return nil, nil, err
		}
		md = http.Header{"authorization": {"Bearer " + tok}}
	}
	conn, err := grpcstream.New(grpcstream.Config{
		Addr:             addr,
		TLS:              tlsConf,
		ConnectTimeout:   c.cfg.ConnectTimeout,
		KeepaliveTime:    c.cfg.KeepaliveTime,
		KeepaliveTimeout: c.cfg.KeepaliveTimeout,
		StreamWindow:     c.cfg.ReceiveWindow,
		ConnWindow:       c.cfg.ReceiveWindow,
		MaxMessageSize:   c.cfg.MaxMessageSize,
		UserAgent:        "meshdns-agent/" + c.cfg.AgentVersion,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, md, nil
}
