package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestControlPlanePolicyFile runs `meshdns controlplane --policy-file` (a
// control plane without the Kubernetes API) and streams the tables of two
// namespaces over real gRPC: the policy of one namespace is in its
// agents' settings, required, and not in the other's.
func TestControlPlanePolicyFile(t *testing.T) {
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(policies, []byte("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\n"+
		"metadata: {name: egress, namespace: team-a}\nspec: {outsideDefault: Deny, rules: [{pattern: API.Corp.Example., action: Allow}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Dispatch(ctx, []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
			"--policy-file", policies, "--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--debounce", "10ms", "--log-level", "error"},
			io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controlplane: %v", err)
		}
	})
	testenv.Eventually(t, "control plane ready", time.Minute, func() bool {
		res, err := http.Get("http://" + adminAddr + "/healthz/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	a := fetchTable(t, grpcAddr, "team-a").GetSettings()
	if p := a.GetPolicy(); p.GetSource() != "team-a/egress" || len(p.GetRules()) != 1 || p.GetRules()[0].GetPattern() != "api.corp.example." {
		t.Errorf("team-a's policy: %v", p)
	}
	if got := a.GetRequires(); len(got) != 1 || got[0] != "policy" {
		t.Errorf("team-a's settings require %v, want [policy]", got)
	}
	if b := fetchTable(t, grpcAddr, "team-b").GetSettings(); b.GetPolicy() != nil {
		t.Errorf("team-b got a policy: %v", b.GetPolicy())
	}
}
