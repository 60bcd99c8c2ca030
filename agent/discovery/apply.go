package discovery

import (
	"errors"
	"fmt"
	"io"

	"github.com/meshdns/meshdns/internal/grpcstream"
	"github.com/meshdns/meshdns/internal/namewire"
)

// What a response does to the agent's table: decided (handle), applied
// from the state dir or from memory, answered with an ACK or a NACK.

// handle applies one response and returns the ACK or NACK for it.
func (c *Client) handle(resp *response) *namewire.Request {
	cur, base := c.current()
	kind := "full"
	if resp.Delta != nil {
		kind = "delta"
	}
	var unchanged bool
	var err error
	code := grpcstream.InvalidArgument
	switch r := c.prob.rejectedVersion(); {
	case r.Version != "" && resp.Version == r.Version:
		// Never applied again on its own: it killed the agent.
		resp.DropFull()
		resp.pending = nil
		code, err = grpcstream.Aborted, errors.New(r.Message)
	case resp.IsFull:
		unchanged, err = c.handleFull(resp, cur, base)
	case resp.Delta != nil && (resp.Delta.BaseVersion != cur || base == nil):
		code, err = grpcstream.FailedPrecondition, wrongBase(resp.Delta.BaseVersion, cur, base)
	case resp.Delta != nil:
		unchanged, err = c.handleDelta(resp, cur, base)
	default:
		err = errors.New("response carries neither a full table nor a delta")
	}
	switch {
	case err != nil:
		return c.nack(resp, kind, cur, code, err)
	case unchanged:
		return c.ackUnchanged(resp, kind)
	}
	return c.ack(resp, kind)
}

// handleFull applies a full table, unless it is the table served
// (unchanged).
func (c *Client) handleFull(resp *response, cur string, base namewire.RawTable) (unchanged bool, err error) {
	if resp.Version == cur && base != nil {
		// Versions name content (a hash of the view), so this is the
		// table we serve: after a restart from the persisted table the
		// stream resends it, and building it again would only double
		// the memory for a moment.
		resp.DropFull()
		return true, nil
	}
	if p := resp.pending; p != nil {
		// Streamed to the state dir as it was received.
		resp.pending = nil
		resp.Keep()
		return false, c.applyStreamed(resp.Version, p)
	}
	full := resp.Full
	resp.Full = nil
	if full == nil {
		full = []byte{}
	}
	s, err := namewire.TableSettings(full)
	if err == nil {
		err = c.supported(s)
	}
	if err != nil {
		return false, err
	}
	return false, c.applyFull(resp.Version, full, s)
}

// applyStreamed applies a full table streamed to the pending state file
// p as it was received.
func (c *Client) applyStreamed(version string, p *pendingState) error {
	s, err := p.settings()
	if err == nil {
		err = c.supported(s)
	}
	if err != nil {
		p.abort()
		return err
	}
	return c.applyPending(version, p, s)
}

// wrongBase says why a delta for base version want does not apply to the
// agent's table: the server thinks the agent holds another version (or a
// rejected table dropped its base). It is NACKed, so the server falls back
// to a full table instead of the agent guessing.
func wrongBase(want, cur string, base namewire.RawTable) error {
	if base == nil {
		return fmt.Errorf("delta for base version %q, agent holds no base table", want)
	}
	return fmt.Errorf("delta for base version %q, agent has %q", want, cur)
}

// handleDelta applies a delta to base, the table of version cur, unless
// it changes nothing (unchanged).
func (c *Client) handleDelta(resp *response, cur string, base namewire.RawTable) (unchanged bool, err error) {
	p, err := namewire.NewDeltaPlan(resp.Delta, c.currentSettings())
	if err != nil {
		return false, err
	}
	if err := c.supported(p.Settings()); err != nil {
		return false, err
	}
	if p.Empty() && resp.Delta.Settings == nil && resp.Version == cur {
		// A resumed stream at the version we serve (a restart from the
		// state dir): nothing to build.
		return true, nil
	}
	return false, c.applyDelta(resp.Version, base, p)
}

// nack counts and logs a response refused, and returns its NACK: the
// version kept, the code and why.
func (c *Client) nack(resp *response, kind, cur string, code grpcstream.Code, err error) *namewire.Request {
	c.metrics.responses.WithLabelValues(kind, "nack").Inc()
	c.log.Warn("rejected name table", "version", resp.Version, "kind", kind, "keep", cur, "err", err)
	return &namewire.Request{
		VersionInfo:   cur,
		ResponseNonce: resp.Nonce,
		ErrorDetail:   &namewire.ErrorDetail{Code: int32(code), Message: err.Error()},
	}
}

// ack notes a response applied (on probation from now, the agent synced),
// and returns its ACK.
func (c *Client) ack(resp *response, kind string) *namewire.Request {
	c.prob.arm()
	c.prob.accepted(resp.Version)
	c.metrics.responses.WithLabelValues(kind, "ack").Inc()
	c.metrics.lastApplied.Set(float64(c.cfg.Now().UnixNano()) / 1e9)
	c.markSynced()
	c.log.Debug("applied name table", "version", resp.Version, "kind", kind)
	return &namewire.Request{VersionInfo: resp.Version, ResponseNonce: resp.Nonce}
}

// ackUnchanged ACKs a response that holds the table already applied.
func (c *Client) ackUnchanged(resp *response, kind string) *namewire.Request {
	c.prob.accepted(resp.Version)
	c.metrics.responses.WithLabelValues(kind, "ack").Inc()
	c.markSynced()
	return &namewire.Request{VersionInfo: resp.Version, ResponseNonce: resp.Nonce}
}

// applyFull applies a full table. With a state dir the table goes to a
// pending state file first and is built from there, so its wire form is
// not in memory during the build; the file becomes the state (persisted
// before the ACK, so a version the server believes applied is the one a
// restart restores) when the table was applied. Without one, or when the
// file cannot be written, the old in-memory base is dropped before the
// build: the two wire forms are never held together.
func (c *Client) applyFull(version string, full []byte, settings *namewire.AgentSettings) error {
	if c.cfg.StateDir != "" {
		// Written zones first (an empty delta's plan reorders it), so
		// the build from the file, and a restart's, is one pass.
		p, err := writePending(c.cfg.StateDir, version, namewire.MemTable(full), namewire.RewritePlan(settings))
		if err == nil {
			full = nil // garbage from here on: the build reuses its memory
			return c.applyPending(version, p, settings)
		}
		if !errors.Is(err, errStateWrite) {
			return err // a malformed table
		}
		c.stateFailed(err)
	}
	c.dropBase()
	if err := c.applyNew(version, namewire.MemTable(full), nil, settings); err != nil {
		return err
	}
	c.setCurrent(version, full, false, settings)
	return nil
}

// applyDelta applies a delta to base. With a state dir the new table is
// streamed from base (the state file, or memory after a failed write)
// into a pending state file and built from there: no wire form of either
// table is in memory. Without one, the new table is made in memory and the
// old one dropped before the build.
func (c *Client) applyDelta(version string, base namewire.RawTable, d *namewire.DeltaPlan) error {
	if c.cfg.StateDir != "" {
		p, err := writePending(c.cfg.StateDir, version, base, d)
		if err == nil {
			return c.applyPending(version, p, d.Settings())
		}
		if !errors.Is(err, errStateWrite) {
			return err // the base, not the disk
		}
		c.stateFailed(err)
	}
	var next []byte
	err := d.Write(base, func(b []byte) error {
		next = append(next, b...)
		return nil
	})
	if err != nil {
		return err
	}
	if next == nil {
		next = []byte{}
	}
	c.dropBase()
	if err := c.applyNew(version, namewire.MemTable(next), nil, d.Settings()); err != nil {
		return err
	}
	c.setCurrent(version, next, false, d.Settings())
	return nil
}

// errStateWrite marks a failure to write the state file (rather than to
// read the base table).
var errStateWrite = errors.New("write state")

// writePending writes base with d applied as a pending state file.
func writePending(dir, version string, base namewire.RawTable, d *namewire.DeltaPlan) (*pendingState, error) {
	size, err := d.Size(base)
	if err != nil {
		return nil, err
	}
	p, err := prepareState(dir, version, size, func(w io.Writer) error {
		return d.Write(base, func(b []byte) error {
			_, err := w.Write(b)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStateWrite, err)
	}
	return p, nil
}

// applyPending applies the table of a pending state file and makes the
// file the state when the table was applied.
func (c *Client) applyPending(version string, p *pendingState, settings *namewire.AgentSettings) error {
	c.dropBase() // when the base was in memory (a state write failed before)
	if err := c.applyNew(version, p.table(), p.shape, settings); err != nil {
		p.abort()
		return err
	}
	if err := p.commit(); err != nil {
		// Applied, but the file is not the state: no base for deltas
		// (the next one is NACKed and the server sends a full table).
		c.stateFailed(err)
		c.setCurrent(version, nil, false, settings)
		return nil
	}
	c.metrics.stateWrites.WithLabelValues("ok").Inc()
	if c.stateFailing.Swap(false) {
		c.log.Info("persisted name table again", "dir", c.cfg.StateDir, "version", version)
	}
	c.setCurrent(version, nil, true, settings)
	return nil
}

// stateFailed counts a state file that could not be written, and logs the
// first of a run of failures: the table is served from memory meanwhile,
// and a state dir that is too small fails every update the same way.
func (c *Client) stateFailed(err error) {
	c.metrics.stateWrites.WithLabelValues("error").Inc()
	if c.stateFailing.Swap(true) {
		c.log.Debug("persist name table", "dir", c.cfg.StateDir, "err", err)
		return
	}
	c.log.Error("persist name table; serving the table from memory, restarts start without it until a write succeeds", "dir", c.cfg.StateDir, "err", err)
}
