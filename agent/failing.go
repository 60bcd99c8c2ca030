package agent

import (
	"sync"
	"time"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// The failing-names report: when the control plane's settings turn it on
// (Telemetry.failing_report, for pods whose namespace opted in), the DNS
// server counts failing answers per name (pkg/proxy's FailingNames, fixed
// memory) and the discovery client sends the top names once a window on
// the stream it holds. Nothing leaves the pod otherwise.

// Bounds of the report's window; the settings' value is clamped to them.
const (
	defaultFailingWindow = time.Minute
	maxFailingWindow     = time.Hour
)

// minFailingWindow bounds the reports an agent sends: one every 5s at
// most (a variable for tests).
var minFailingWindow = 5 * time.Second

// failingState is the report as the agent runs it.
type failingState struct {
	mu  sync.Mutex             // guards cur
	cur namewire.FailingReport // Enabled false: off
}

// setFailingReport applies the report's settings (nil: off). The same
// settings again (every version carries them) keep the window running.
func (a *Agent) setFailingReport(r *namewire.FailingReport) {
	var want namewire.FailingReport
	if r != nil && r.Enabled {
		want = *r
		if want.TopN == 0 {
			want.TopN = proxy.DefaultFailingTopN
		}
		want.TopN = min(want.TopN, proxy.MaxFailingTopN)
		w := time.Duration(r.WindowSeconds) * time.Second
		if w == 0 {
			w = defaultFailingWindow
		}
		want.WindowSeconds = uint32(min(max(w, minFailingWindow), maxFailingWindow) / time.Second)
	}
	a.failing.mu.Lock()
	defer a.failing.mu.Unlock()
	if a.failing.cur == want {
		return
	}
	a.failing.cur = want
	if !want.Enabled {
		a.run.server.SetFailingNames(nil)
		if a.run.disc != nil {
			a.run.disc.SetReport(nil)
		}
		a.log.Info("failing-names report off")
		return
	}
	f := proxy.NewFailingNames(int(want.TopN))
	a.run.server.SetFailingNames(f)
	if a.run.disc != nil {
		a.run.disc.SetReport(&discovery.Report{
			Window: time.Duration(want.WindowSeconds) * time.Second,
			Take:   func() []namewire.FailingName { return wireFailing(f) },
		})
	}
	a.log.Info("failing-names report on", "top_n", want.TopN, "window_seconds", want.WindowSeconds)
}

// wireFailing takes f's window in the protocol's form.
func wireFailing(f *proxy.FailingNames) []namewire.FailingName {
	names, _ := f.Take()
	out := make([]namewire.FailingName, len(names))
	for i, n := range names {
		out[i] = namewire.FailingName{Name: n.Name, Rcode: uint32(n.Rcode), Count: n.Count}
	}
	return out
}
