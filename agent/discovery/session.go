package discovery

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// windowSize is the agent's HTTP/2 receive window (stream and connection).
const windowSize = 4 << 20

// session runs one stream to addr until it fails or ctx ends. got reports
// whether the stream delivered at least one response: only then was the
// control plane really there, and the backoff starts over.
func (c *Client) session(ctx context.Context, addr string) (got bool, err error) {
	creds, err := c.transportCredentials()
	if err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, err
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageSize)),
		// Static windows large enough for a full table in one go: with
		// dynamic windows every response makes the agent send a BDP ping
		// that the control plane must read and answer, which at
		// thousands of agents costs it more than sending the update.
		grpc.WithStaticStreamWindowSize(windowSize),
		grpc.WithStaticConnWindowSize(windowSize),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                c.cfg.KeepaliveTime,
			Timeout:             c.cfg.KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
	)
	if err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	if err := c.waitReady(ctx, conn); err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, fmt.Errorf("connect %s: %w", addr, err)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.cfg.TokenFile != "" {
		tok, err := readToken(c.cfg.TokenFile)
		if err != nil {
			c.metrics.connects.WithLabelValues("error").Inc()
			return false, err
		}
		sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+tok)
	}
	stream, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(sctx, grpc.ForceCodecV2(wireCodec{}))
	if err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, fmt.Errorf("open stream %s: %w", addr, err)
	}
	version, _ := c.current()
	first := &meshdnsv1.StreamNameTableRequest{
		Identity: &meshdnsv1.AgentIdentity{
			PodName:       c.cfg.PodName,
			Namespace:     c.cfg.Namespace,
			ClusterDomain: c.cfg.ClusterDomain,
			InstanceId:    c.cfg.InstanceID,
			AgentVersion:  c.cfg.AgentVersion,
		},
		VersionInfo: version,
	}
	if err := stream.Send(first); err != nil {
		c.metrics.connects.WithLabelValues("error").Inc()
		return false, fmt.Errorf("send identity to %s: %w", addr, err)
	}
	c.metrics.connects.WithLabelValues("ok").Inc()
	c.metrics.connected.Set(1)
	c.mu.Lock()
	c.addr = addr
	c.mu.Unlock()
	defer func() {
		c.metrics.connected.Set(0)
		c.mu.Lock()
		c.addr = ""
		c.mu.Unlock()
	}()
	c.log.Info("control plane stream open", "addr", addr, "version", version)

	for {
		// RecvMsg with our own type: the codec leaves the table in wire
		// form (codec.go).
		var raw rawResponse
		if err := stream.RecvMsg(&raw); err != nil {
			return got, fmt.Errorf("receive from %s: %w", addr, err)
		}
		got = true
		resp, err := parseResponse(raw.b)
		if err != nil {
			return got, fmt.Errorf("parse response from %s: %w", addr, err)
		}
		if err := stream.Send(c.handle(resp)); err != nil {
			return got, fmt.Errorf("send ack to %s: %w", addr, err)
		}
	}
}

// waitReady connects conn and waits until it is ready, failing fast when
// the address refuses (TransientFailure) so the next one is tried at once.
func (c *Client) waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return errors.New("connection failed")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// handle applies one response and returns the ACK or NACK for it.
func (c *Client) handle(resp *response) *meshdnsv1.StreamNameTableRequest {
	cur, curWire := c.current()
	kind := "full"
	var next []byte
	var err error
	code := codes.InvalidArgument
	switch {
	case resp.isFull:
		if resp.version == cur && curWire != nil {
			// Versions name content (a hash of the view), so this is
			// the table we serve: after a restart from the persisted
			// table the stream resends it, and building it again
			// would only double the memory for a moment.
			c.metrics.responses.WithLabelValues(kind, "ack").Inc()
			c.markSynced()
			return &meshdnsv1.StreamNameTableRequest{VersionInfo: cur, ResponseNonce: resp.nonce}
		}
		next = resp.full
		if next == nil {
			next = []byte{}
		}
	case resp.delta != nil:
		kind = "delta"
		if resp.delta.GetBaseVersion() != cur || curWire == nil {
			// The server thinks we hold another version: NACK so it falls
			// back to a full table instead of us guessing.
			code = codes.FailedPrecondition
			err = fmt.Errorf("delta for base version %q, agent has %q", resp.delta.GetBaseVersion(), cur)
		} else {
			next, err = applyDeltaWire(curWire, resp.delta)
		}
	default:
		err = errors.New("response carries neither a full table nor a delta")
	}
	if err == nil {
		err = c.apply(resp.version, next)
	}
	if err != nil {
		c.metrics.responses.WithLabelValues(kind, "nack").Inc()
		c.log.Warn("rejected name table", "version", resp.version, "kind", kind, "keep", cur, "err", err)
		return &meshdnsv1.StreamNameTableRequest{
			VersionInfo:   cur,
			ResponseNonce: resp.nonce,
			ErrorDetail:   &meshdnsv1.ErrorDetail{Code: int32(code), Message: err.Error()},
		}
	}
	c.setCurrent(resp.version, next)
	c.metrics.responses.WithLabelValues(kind, "ack").Inc()
	c.metrics.lastApplied.Set(float64(c.cfg.Now().UnixNano()) / 1e9)
	c.markSynced()
	c.log.Debug("applied name table", "version", resp.version, "kind", kind, "bytes", len(next))
	// Persisting a big table takes milliseconds; the ACK waits for it so a
	// version the server believes applied is also the one a restart
	// restores.
	if c.cfg.StateDir != "" {
		if err := saveState(c.cfg.StateDir, resp.version, next); err != nil {
			c.metrics.stateWrites.WithLabelValues("error").Inc()
			c.log.Error("persist name table", "dir", c.cfg.StateDir, "err", err)
		} else {
			c.metrics.stateWrites.WithLabelValues("ok").Inc()
		}
	}
	return &meshdnsv1.StreamNameTableRequest{VersionInfo: resp.version, ResponseNonce: resp.nonce}
}
