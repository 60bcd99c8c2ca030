//go:build !agentonly

package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/kubesource"
)

func TestKubeOptionFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    kubesource.Options
		wantErr string
	}{
		{name: "none"},
		{
			name: "all",
			args: []string{"--namespace-labels", "dns=on", "--endpoint-pod-names", "--ignore-empty-service",
				"--noendpoints", "--fallthrough", "--startup-timeout", "5s"},
			want: kubesource.Options{NamespaceLabels: "dns=on", EndpointPodNames: true, IgnoreEmptyService: true,
				NoEndpoints: true, Fallthrough: true, StartupTimeout: 5 * time.Second},
		},
		{name: "fallthrough the cluster domain", args: []string{"--fallthrough=Cluster.Local."}, want: kubesource.Options{Fallthrough: true}},
		{name: "fallthrough a parent", args: []string{"--fallthrough=local,in-addr.arpa"}, want: kubesource.Options{Fallthrough: true}},
		{name: "fallthrough reverse zones only", args: []string{"--fallthrough=in-addr.arpa,ip6.arpa"}},
		{name: "fallthrough false", args: []string{"--fallthrough=false"}},
		{name: "fallthrough part of the domain", args: []string{"--fallthrough=shared.cluster.local"}, wantErr: "only the whole cluster domain"},
		{name: "fallthrough elsewhere", args: []string{"--fallthrough=example.org"}, wantErr: "not a zone of the Kubernetes source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newKubeOptionFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if got := f.set(); got != (len(tt.args) > 0 && tt.name != "fallthrough false") {
				t.Errorf("set() = %v", got)
			}
			got, err := f.options("cluster.local")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}
