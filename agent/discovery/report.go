package discovery

import (
	"context"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/grpcstream"
	"github.com/meshdns/meshdns/internal/namewire"
)

// The failing-names report (StreamNameTableRequest.failing) goes to the
// control plane of the open stream once a window: on the ACK of a new
// version when one goes out after the window ended, else, when the window
// ends, on a repeat of the agent's last answer (same version, same
// nonce), which the control plane takes as a report and nothing else. A
// window without failures sends nothing, unless the report before it had
// names (so the control plane stops showing them). Before the stream's
// first answer there is nothing to repeat, and the report waits for the
// next window.

// Report is what the client reports and how often.
type Report struct {
	// Window is the time between two reports; at least a second.
	Window time.Duration
	// Take returns the names that failed most since its last call, the
	// most frequent first; called once a window from the stream's
	// reporter goroutine.
	Take func() []namewire.FailingName
}

// reporting is the report's state, guarded by Client.reportMu.
type reporting struct {
	cfg     *Report       // or nil: off
	changed chan struct{} // closed and replaced when cfg changes
	taken   time.Time     // last Take, the start of the window
	// hadNames: the last report sent had names (the control plane shows
	// them until a report replaces them).
	hadNames bool
	// The last answer sent on the open stream; nonce "" before the first.
	version, nonce string
}

// SetReport starts (r non-nil) or stops (nil) the failing-names report;
// it takes effect on the open stream at once, and a new window starts.
func (c *Client) SetReport(r *Report) {
	if r != nil && r.Window < time.Second {
		r2 := *r
		r2.Window = time.Second
		r = &r2
	}
	c.reportMu.Lock()
	defer c.reportMu.Unlock()
	c.rep.cfg = r
	c.rep.taken, c.rep.hadNames = c.cfg.Now(), false
	c.changedLocked()
}

// changedLocked wakes the reporter of the open stream.
func (c *Client) changedLocked() {
	if c.rep.changed != nil {
		close(c.rep.changed)
	}
	c.rep.changed = make(chan struct{})
}

// answered notes the answer just sent on the stream, for the next report
// to repeat.
func (c *Client) answered(r *namewire.Request) {
	c.reportMu.Lock()
	c.rep.version, c.rep.nonce = r.VersionInfo, r.ResponseNonce
	c.reportMu.Unlock()
}

// startReports runs the stream's reporter until the returned stop, which
// closes the stream (so a send blocked on it returns) and waits for it.
func (c *Client) startReports(ctx context.Context, stream *grpcstream.Stream) (stop func()) {
	c.reportMu.Lock()
	c.rep.version, c.rep.nonce = "", ""
	c.reportMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.reportLoop(ctx, stream) })
	return func() {
		cancel()
		stream.Close()
		wg.Wait()
	}
}

func (c *Client) reportLoop(ctx context.Context, stream *grpcstream.Stream) {
	var buf []byte
	for {
		c.reportMu.Lock()
		if c.rep.changed == nil {
			c.rep.changed = make(chan struct{})
		}
		cfg, changed := c.rep.cfg, c.rep.changed
		var tick <-chan time.Time
		var timer *time.Timer
		if cfg != nil {
			// Until the window ends (an ACK that took the report
			// started a new one).
			timer = time.NewTimer(max(c.rep.taken.Add(cfg.Window).Sub(c.cfg.Now()), 0))
			tick = timer.C
		}
		c.reportMu.Unlock()
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-changed:
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-tick:
		}
		c.reportMu.Lock()
		req := &namewire.Request{VersionInfo: c.rep.version, ResponseNonce: c.rep.nonce}
		if c.rep.cfg != cfg || c.rep.nonce == "" {
			// Changed meanwhile, or nothing answered on this stream yet.
			c.reportMu.Unlock()
			continue
		}
		req.Failing = c.dueLocked()
		c.reportMu.Unlock()
		if req.Failing == nil {
			continue
		}
		buf = req.Append(buf[:0])
		if err := stream.Send(buf); err != nil {
			return // the stream ended; the session reports why
		}
		if cap(buf) > 64<<10 {
			buf = nil
		}
	}
}

// dueReport returns the report for an ACK about to go out, when its window
// has ended, or nil.
func (c *Client) dueReport() *namewire.FailingNames {
	c.reportMu.Lock()
	defer c.reportMu.Unlock()
	return c.dueLocked()
}

// dueLocked takes the window's report when it has ended and starts the
// next; nil when it has not, when the report is off, or when there is
// nothing to say (no names now, none shown from before).
func (c *Client) dueLocked() *namewire.FailingNames {
	cfg := c.rep.cfg
	now := c.cfg.Now()
	if cfg == nil || now.Sub(c.rep.taken) < cfg.Window {
		return nil
	}
	window := now.Sub(c.rep.taken)
	c.rep.taken = now
	names := cfg.Take()
	if len(names) == 0 && !c.rep.hadNames {
		return nil
	}
	c.rep.hadNames = len(names) > 0
	return &namewire.FailingNames{WindowSeconds: uint32((window + time.Second/2) / time.Second), Names: names}
}
