package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/mcssource"
)

// mcsFlags turn the multi-cluster source (clusterset.local from
// ServiceImports) on or off.
type mcsFlags struct {
	on   bool
	zone string
}

func newMCSFlags(fs *flag.FlagSet) *mcsFlags {
	f := &mcsFlags{}
	fs.BoolVar(&f.on, "multicluster", true, "serve clusterset.local names from ServiceImports (multicluster.x-k8s.io) while their CRD is installed; false leaves the zone to the cluster DNS")
	fs.StringVar(&f.zone, "multicluster-zone", "clusterset.local", "the zone of the ServiceImports' names (CoreDNS: multicluster ZONE)")
	return f
}

// apply adds the multi-cluster source beside the Kubernetes source (rc not
// nil). It claims clusterset.local only while the API server serves
// ServiceImports, so leaving it on in a cluster without the CRD costs one
// discovery request per recheck.
func (f *mcsFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	if rc == nil || !f.on {
		return nil
	}
	client, err := mcssource.NewClientForConfig(rc)
	if err != nil {
		return err
	}
	src, err := mcssource.New(mcssource.Config{
		Client:     client,
		Zone:       f.zone,
		Logger:     log.With("component", "mcssource"),
		Registerer: cfg.Registerer,
	})
	if err != nil {
		return err
	}
	cfg.Sources = append(cfg.Sources, src)
	return nil
}
