package agent

import (
	"context"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/agent/ingest"
)

// sourceParts are the parts that feed ingest, in start order, and the
// helpers beside them: without a table source the agent forwards
// everything from the empty table, ready at once, before any helper runs;
// a table source's first table (the file, or the persisted one) is in
// before the DNS server answers.
func (a *Agent) sourceParts() []part {
	cfg := a.cfg
	switch {
	case cfg.NameTableFile != "":
		return append(a.auxParts(), a.filePart())
	case len(cfg.ControlPlanes) > 0:
		return append(a.auxParts(), a.controlPlaneParts()...)
	}
	// No table source: a plain forwarder. An empty table answers only
	// dns-version and forwards the rest, and there is nothing to wait for.
	forwarder := part{name: "forwarder", prime: func() error {
		if err := a.run.tables.Apply(ingest.SourceNone, nil); err != nil {
			return err
		}
		a.setReady("no table source")
		return nil
	}}
	return append([]part{forwarder}, a.auxParts()...)
}

// filePart follows the table file. Each good table marks the agent
// ready, the first load included.
func (a *Agent) filePart() part {
	return part{
		name: "name table file",
		open: func() error {
			a.run.file = &fileSource{
				path:     a.cfg.NameTableFile,
				interval: a.cfg.FilePollInterval,
				apply: func(v ingest.Version) error {
					if err := a.apply(ingest.SourceFile, v); err != nil {
						return err
					}
					a.setReady("name table loaded")
					return nil
				},
				log: a.log,
			}
			return nil
		},
		prime: func() error {
			f := a.run.file
			if err := f.load(); err != nil {
				f.lastErr = err.Error() // the watch's first check does not log it again
				a.log.Error("rejected name table file; serving without a table until a good one appears", "err", err)
			}
			return nil
		},
		run: func(ctx context.Context) error { return a.run.file.Run(ctx) },
	}
}

// controlPlaneParts follow the control plane stream: the persisted table
// is restored first, then the stream runs, and readiness waits for it.
func (a *Agent) controlPlaneParts() []part {
	var restored bool // set by the prime, before readiness starts
	return []part{{
		name: "control plane",
		open: func() error {
			var err error
			a.run.disc, err = discovery.New(a.discoveryConfig())
			return err
		},
		prime: func() error {
			a.restoring.Store(true)
			ok, err := a.run.disc.Restore()
			a.restoring.Store(false)
			if err != nil {
				a.log.Error("persisted name table not restored", "err", err)
			}
			restored = ok
			return nil
		},
		run: func(ctx context.Context) error { return a.run.disc.Run(ctx) },
	}, {
		name: "readiness",
		run:  func(ctx context.Context) error { return a.waitSynced(ctx, restored) },
	}}
}

// discoveryConfig is the discovery client's configuration; its versions
// go to ingest, as restored from the state directory while Restore runs.
func (a *Agent) discoveryConfig() discovery.Config {
	cfg := a.cfg
	return discovery.Config{
		Addrs:         cfg.ControlPlanes,
		PodName:       cfg.PodName,
		Namespace:     cfg.Namespace,
		ClusterDomain: cfg.ClusterDomain,
		AgentVersion:  cfg.Version,
		InstanceID:    cfg.InstanceID,
		Features:      ingest.Features,
		Apply: func(v *discovery.Version) error {
			src := ingest.SourceControlPlane
			if a.restoring.Load() {
				src = ingest.SourceState
			}
			return a.apply(src, v)
		},
		StateDir:  cfg.StateDir,
		Probation: cfg.Probation,
		CACert:    cfg.CACert,
		TLSCert:   cfg.TLSCert,
		TLSKey:    cfg.TLSKey,
		TokenFile: cfg.TokenFile,
		Logger:    a.log,
		Registry:  cfg.Registry,
		Now:       cfg.Now,
	}
}
