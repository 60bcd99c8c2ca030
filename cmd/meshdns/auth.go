package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/auth"
)

// authFlags say how `meshdns controlplane` verifies agents.
type authFlags struct {
	audience    string
	trustDomain string
	insecure    bool
	podWatch    bool
}

func newAuthFlags(fs *flag.FlagSet) *authFlags {
	f := &authFlags{}
	fs.StringVar(&f.audience, "token-audience", "meshdns", "audience agents' ServiceAccount tokens must be issued for (verified with the TokenReview API)")
	fs.StringVar(&f.trustDomain, "trust-domain", "cluster.local", "SPIFFE trust domain of agents' client certificates (spiffe://DOMAIN/ns/NS/sa/SA), with --client-ca")
	fs.BoolVar(&f.podWatch, "token-pod-watch", true, "watch pods (metadata only) so that the stream of a pod-bound token ends when its pod is deleted; false ends such streams only when their token expires (VM control planes, whose agents are not pods and which may not list pods)")
	fs.BoolVar(&f.insecure, "insecure-allow-unauthenticated", false, "INSECURE: serve agents that present no credential the namespace and pod they claim; any client reaching the gRPC port can then read every namespace's names")
	return f
}

// apply sets cfg.Authenticator: TokenReview when the control plane reaches
// an API server, SPIFFE client certificates with --client-ca, and the
// agents' bare claims only with --insecure-allow-unauthenticated. Without
// any of them the control plane refuses to start rather than serve every
// namespace's names to whoever asks.
func (f *authFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	var as []auth.Authenticator
	if rc != nil {
		rv, err := auth.NewReviewer(rc)
		if err != nil {
			return err
		}
		tr, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv, Audience: f.audience})
		if err != nil {
			return err
		}
		as = append(as, tr)
		// The pods tokens are bound to are watched, so that a stream
		// ends with its pod (server.Config.Pods).
		if f.podWatch {
			if _, err := sharedPods(cfg, log, rc); err != nil {
				return err
			}
		}
	}
	if cfg.ClientCA != "" {
		s, err := auth.SPIFFE(f.trustDomain)
		if err != nil {
			return err
		}
		as = append(as, s)
	}
	if f.insecure {
		log.Warn("INSECURE: --insecure-allow-unauthenticated: agents without a credential get the namespace they claim; " +
			"anyone reaching the gRPC port can read every namespace's names. Use ServiceAccount tokens or SPIFFE client certificates instead.")
		as = append(as, auth.Insecure())
	}
	if len(as) == 0 {
		return cli.Usagef("no way to authenticate agents: run with the Kubernetes source (ServiceAccount tokens, TokenReview), " +
			"--client-ca (SPIFFE client certificates), or --insecure-allow-unauthenticated")
	}
	cfg.Authenticator = auth.Chain(as...)
	return nil
}
