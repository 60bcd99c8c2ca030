package main

import (
	"flag"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/kubesource"
)

// kubeOptionFlags are the flags of `meshdns controlplane` named after the
// options of CoreDNS's kubernetes plugin (controlplane/kubesource README).
type kubeOptionFlags struct {
	namespaceLabels    string
	endpointPodNames   bool
	ignoreEmptyService bool
	noEndpoints        bool
	fallThrough        fallthroughFlag
	startupTimeout     time.Duration
}

func newKubeOptionFlags(fs *flag.FlagSet) *kubeOptionFlags {
	f := &kubeOptionFlags{}
	fs.StringVar(&f.namespaceLabels, "namespace-labels", "", "expose only namespaces matching this label selector (CoreDNS namespace_labels; needs list/watch on namespaces)")
	fs.BoolVar(&f.endpointPodNames, "endpoint-pod-names", false, "name an endpoint without a hostname after its pod, not its dashed IP (CoreDNS endpoint_pod_names)")
	fs.BoolVar(&f.ignoreEmptyService, "ignore-empty-service", false, "NXDOMAIN for a ClusterIP service without ready endpoints (CoreDNS ignore empty_service)")
	fs.BoolVar(&f.noEndpoints, "noendpoints", false, "no EndpointSlice watch: headless services and endpoint names do not exist (CoreDNS noendpoints)")
	fs.Var(&f.fallThrough, "fallthrough", "agents forward names they do not know in the cluster domain instead of answering NXDOMAIN (CoreDNS fallthrough); alone or with zones, comma-separated")
	fs.DurationVar(&f.startupTimeout, "startup-timeout", 0, "serve without the cluster zone if the first sync takes longer (CoreDNS startup_timeout); 0 waits for it")
	return f
}

// options returns the source's options for the cluster domain.
func (f *kubeOptionFlags) options(clusterDomain string) (kubesource.Options, error) {
	ft, err := f.fallThrough.covers(clusterDomain)
	if err != nil {
		return kubesource.Options{}, err
	}
	return kubesource.Options{
		NamespaceLabels:    f.namespaceLabels,
		EndpointPodNames:   f.endpointPodNames,
		IgnoreEmptyService: f.ignoreEmptyService,
		NoEndpoints:        f.noEndpoints,
		Fallthrough:        ft,
		StartupTimeout:     f.startupTimeout,
	}, nil
}

// set reports whether any option flag is given (they need the source).
func (f *kubeOptionFlags) set() bool {
	return f.namespaceLabels != "" || f.endpointPodNames || f.ignoreEmptyService || f.noEndpoints ||
		f.fallThrough.on || f.startupTimeout != 0
}

// fallthroughFlag is --fallthrough: given alone (or "true") it covers
// every zone of the source, as CoreDNS's fallthrough without zones; else
// it lists zones.
type fallthroughFlag struct {
	on    bool
	zones []string // empty with on: every zone
}

func (f *fallthroughFlag) IsBoolFlag() bool { return true }

func (f *fallthroughFlag) String() string {
	if f == nil || !f.on {
		return ""
	}
	if len(f.zones) == 0 {
		return "true"
	}
	return strings.Join(f.zones, ",")
}

func (f *fallthroughFlag) Set(v string) error {
	switch v {
	case "true", "":
		*f = fallthroughFlag{on: true}
	case "false":
		*f = fallthroughFlag{}
	default:
		f.on = true
		for z := range strings.SplitSeq(v, ",") {
			if z = strings.TrimSpace(z); z != "" {
				f.zones = append(f.zones, z)
			}
		}
	}
	return nil
}

// covers reports whether the flag covers the cluster domain. The reverse
// zones need nothing: an agent forwards the PTR question of an address
// its table does not know. A zone inside the cluster domain is refused:
// the table marks whole zones as complete, so part of one cannot fall
// through alone.
func (f *fallthroughFlag) covers(clusterDomain string) (bool, error) {
	if !f.on {
		return false, nil
	}
	if len(f.zones) == 0 {
		return true, nil
	}
	domain := dns.Fqdn(strings.ToLower(clusterDomain))
	covered := false
	for _, z := range f.zones {
		z = dns.Fqdn(strings.ToLower(z))
		switch {
		case dns.IsSubDomain(z, domain):
			covered = true
		case dns.IsSubDomain("in-addr.arpa.", z), dns.IsSubDomain("ip6.arpa.", z):
		case dns.IsSubDomain(domain, z):
			return false, cli.Usagef("--fallthrough %s: only the whole cluster domain %s can fall through", z, clusterDomain)
		default:
			return false, cli.Usagef("--fallthrough %s: not a zone of the Kubernetes source (%s or a reverse zone)", z, clusterDomain)
		}
	}
	return covered, nil
}
