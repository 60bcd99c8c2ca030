package agentcmd

import (
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/cmd/internal/safemode"
	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/resolvconf"
)

// supervisorSafe is the supervisor's safe mode: the server, and how each
// episode's mode is decided from the agent's flags and state.
type supervisorSafe struct {
	*safemode.Server
	cfg agent.Config
	log *slog.Logger
}

// newSafeMode prepares safe mode on the supervisor's sockets; its probes
// and metrics use the agent's --probe-addr while no agent runs.
func newSafeMode(cfg agent.Config, files []*os.File, log *slog.Logger) (*supervisorSafe, error) {
	reg := metrics.NewRegistry()
	reg.MustRegister(metrics.GoCollector{}, metrics.ProcessCollector{}, buildInfoGauge())
	s, err := safemode.New(safemode.Config{
		Files:     files,
		ProbeAddr: cfg.ProbeAddr,
		Timeout:   cfg.UpstreamTimeout,
		Logger:    log,
		Registry:  reg,
	})
	if err != nil {
		return nil, err
	}
	return &supervisorSafe{Server: s, cfg: cfg, log: log}, nil
}

// Enter starts safe mode for reason, deciding its mode now: the state
// dir's policy and the upstreams may have changed since the supervisor
// started. A failure is logged: the supervisor keeps trying the agent.
func (s *supervisorSafe) Enter(reason string) {
	if s.Serving() {
		return
	}
	mode := safemode.Mode{Policy: safemode.ReadPolicy(s.cfg.StateDir)}
	if !mode.Policy.Enforcing {
		ups, err := safeUpstreams(s.cfg)
		if err != nil {
			s.log.Error("safe mode: no upstream, refusing every query", "err", err)
		}
		mode.Upstreams = ups
	}
	if err := s.Server.Enter(reason, mode); err != nil {
		s.log.Error("safe mode", "err", err)
	}
}

// safeUpstreams are the plain DNS upstreams safe mode forwards to, chosen
// as the agent chooses its own: --upstream, else on port 53 the VM's saved
// resolvers, else the resolv.conf nameservers; never the agent's own
// addresses. DNS-over-TLS upstreams are left out: safe mode forwards
// plain DNS only.
func safeUpstreams(cfg agent.Config) ([]string, error) {
	ups := cfg.Upstreams
	if len(ups) == 0 {
		rc, err := resolvconf.ReadFile(cfg.ResolvConf)
		if err != nil {
			return nil, err
		}
		ups = rc.HostPorts()
		if slices.ContainsFunc(cfg.DNSAddrs, func(a string) bool { return strings.HasSuffix(a, ":53") }) && cfg.VMResolvConf != "" {
			vrc, err := resolvconf.ReadFile(cfg.VMResolvConf)
			switch {
			case err == nil:
				ups = vrc.HostPorts()
			case !errors.Is(err, fs.ErrNotExist):
				return nil, err
			}
		}
	}
	var out []string
	for _, u := range ups {
		if strings.Contains(u, "://") || isOwnAddr(u, cfg.DNSAddrs) {
			continue
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("no plain DNS upstream besides the agent's own addresses")
	}
	return out, nil
}

// isOwnAddr reports whether upstream u is one of the agent's listen
// addresses (an unspecified host covers every loopback address of its
// port): forwarding there would loop.
func isOwnAddr(u string, listen []string) bool {
	uh, up, err := net.SplitHostPort(u)
	if err != nil {
		return false
	}
	for _, l := range listen {
		lh, lp, err := net.SplitHostPort(l)
		if err != nil || lp != up {
			continue
		}
		ip := net.ParseIP(uh)
		if lh == uh || (lh == "" || lh == "0.0.0.0" || lh == "::") && ip != nil && ip.IsLoopback() {
			return true
		}
	}
	return false
}
