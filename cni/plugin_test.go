package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/iptables"
)

// fakeRunner records the commands the plugin runs and answers every
// iptables-save with an empty ruleset.
type fakeRunner struct {
	mu      sync.Mutex
	netns   []string
	restore []string
}

func (f *fakeRunner) forNetNS(path string) iptables.Runner {
	f.mu.Lock()
	f.netns = append(f.netns, path)
	f.mu.Unlock()
	return f
}

func (f *fakeRunner) Run(_ context.Context, stdin []byte, name string, _ ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasSuffix(name, "-restore") {
		f.restore = append(f.restore, name+"\n"+string(stdin))
	}
	return nil, nil
}

const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"address":"10.244.0.5/24","interface":0}]}`

func netConf(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	c := map[string]any{"cniVersion": "1.0.0", "name": "k8s", "type": PluginType, "kubeconfig": "/etc/cni/net.d/" + KubeconfigName,
		"backend": "legacy", "prevResult": json.RawMessage(prevResult)}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExec(t *testing.T) {
	pods := map[string]map[string]string{
		"demo/injected": {AnnotationRedirect: Redirect{ProxyUID: 2000, ProxyGID: 3000, DNSPort: 5353}.String()},
		"demo/plain":    {"other": "x"},
		"demo/bad":      {AnnotationRedirect: `{"proxyUID":0,"dnsPort":53}`},
	}
	lookup := func(ctx context.Context, kubeconfig, ns, name string) (map[string]string, error) {
		if kubeconfig != "/etc/cni/net.d/"+KubeconfigName {
			return nil, errors.New("wrong kubeconfig " + kubeconfig)
		}
		switch ns {
		case "down":
			return nil, errors.New("connection refused")
		case "rejected":
			return nil, fmt.Errorf("401 Unauthorized: %w", ErrCredentialRejected)
		case "hangs":
			<-ctx.Done()
			return nil, ctx.Err()
		case "kube-system", "meshdns-cni":
			return nil, errors.New("an API call for a namespace never injected")
		}
		return pods[ns+"/"+name], nil
	}
	k8s := func(cmd, ns, pod string) Args {
		return Args{Command: cmd, ContainerID: "c1", NetNS: "/run/netns/x", Namespace: ns, Pod: pod}
	}
	tests := []struct {
		name        string
		args        Args
		stdin       []byte
		wantOut     string   // exact stdout; "" for none
		wantErr     string   // substring; "" for success
		wantRestore []string // substrings of the restore input, all families together
		wantNoRules bool
	}{
		{name: "version", args: Args{Command: "VERSION"}, wantOut: `{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n", wantNoRules: true},
		{name: "not a kubernetes pod passes through", args: Args{Command: "ADD", NetNS: "/run/netns/x"}, stdin: netConf(t, nil), wantOut: prevResult, wantNoRules: true},
		{name: "pod without the annotation passes through", args: k8s("ADD", "demo", "plain"), stdin: netConf(t, nil), wantOut: prevResult, wantNoRules: true},
		{name: "pod gone passes through", args: k8s("ADD", "demo", "gone"), stdin: netConf(t, nil), wantOut: prevResult, wantNoRules: true},
		{
			name: "injected pod, capture all without the dns capability", args: k8s("ADD", "demo", "injected"), stdin: netConf(t, nil), wantOut: prevResult,
			wantRestore: []string{"iptables-legacy-restore", "ip6tables-legacy-restore", "--uid-owner 2000", "--gid-owner 3000", "--to-ports 5353", "-p udp -m udp --dport 53"},
		},
		{
			name: "injected pod, the runtime's nameservers", args: k8s("ADD", "demo", "injected"),
			stdin:   netConf(t, map[string]any{"runtimeConfig": map[string]any{"dns": map[string]any{"servers": []string{"10.96.0.10"}}}, "disableIPv6": true}),
			wantOut: prevResult, wantRestore: []string{"-d 10.96.0.10/32 -p udp", "--to-ports 5353"},
		},
		{name: "unreadable annotation fails the pod", args: k8s("ADD", "demo", "bad"), stdin: netConf(t, nil), wantErr: "no positive proxyUID", wantNoRules: true},
		{name: "API server down fails the pod", args: k8s("ADD", "down", "x"), stdin: netConf(t, nil), wantErr: "connection refused", wantNoRules: true},
		{name: "API server that does not answer fails the pod in bounded time", args: k8s("ADD", "hangs", "x"), stdin: netConf(t, nil), wantErr: "did not answer within 50ms", wantNoRules: true},
		{name: "rejected credential names the installer", args: k8s("ADD", "rejected", "x"), stdin: netConf(t, nil), wantErr: "is its DaemonSet pod running", wantNoRules: true},
		{name: "kube-system decided without the API server", args: k8s("ADD", "kube-system", "kube-proxy-x"), stdin: netConf(t, nil), wantOut: prevResult, wantNoRules: true},
		{name: "kube-system check without the API server", args: k8s("CHECK", "kube-system", "kube-proxy-x"), stdin: netConf(t, nil), wantNoRules: true},
		{
			name: "excluded namespace decided without the API server", args: k8s("ADD", "meshdns-cni", "x"),
			stdin: netConf(t, map[string]any{"excludeNamespaces": []string{"meshdns-system", "meshdns-cni"}}), wantOut: prevResult, wantNoRules: true,
		},
		{name: "namespace not excluded is looked up", args: k8s("ADD", "meshdns-cni", "x"), stdin: netConf(t, nil), wantErr: "never injected", wantNoRules: true},
		{name: "not chained", args: k8s("ADD", "demo", "injected"), stdin: netConf(t, map[string]any{"prevResult": nil}), wantErr: "only runs chained", wantNoRules: true},
		{name: "bad backend", args: k8s("ADD", "demo", "injected"), stdin: netConf(t, map[string]any{"backend": "ebpf"}), wantErr: "unknown iptables backend", wantNoRules: true},
		{name: "malformed configuration", args: k8s("ADD", "demo", "injected"), stdin: []byte("{"), wantErr: "parse network configuration", wantNoRules: true},
		{name: "del does nothing", args: k8s("DEL", "demo", "injected"), stdin: netConf(t, nil), wantNoRules: true},
		{name: "unknown command", args: k8s("FROB", "demo", "injected"), stdin: netConf(t, nil), wantErr: "unknown CNI_COMMAND", wantNoRules: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRunner{}
			p, err := New(Config{Pods: lookup, Runner: f.forNetNS, LookupTimeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = p.Exec(context.Background(), tt.args, tt.stdin, &out)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Exec: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Exec error %v, want one containing %q", err, tt.wantErr)
			}
			if tt.wantErr == "" {
				if diff := cmp.Diff(tt.wantOut, out.String()); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
			}
			all := strings.Join(f.restore, "\n")
			if tt.wantNoRules && (len(f.restore) > 0 || len(f.netns) > 0) {
				t.Errorf("rules written for a pod left alone:\n%s", all)
			}
			for _, w := range tt.wantRestore {
				if !strings.Contains(all, w) {
					t.Errorf("restore input lacks %q:\n%s", w, all)
				}
			}
			if len(tt.wantRestore) > 0 && !cmp.Equal(f.netns, []string{"/run/netns/x"}) {
				t.Errorf("rules written in %v, want the pod's network namespace", f.netns)
			}
		})
	}
}

func TestArgsFromEnv(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/var/run/netns/cni-1",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=app;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u"}
	got := ArgsFromEnv(func(k string) string { return env[k] })
	want := Args{Command: "ADD", ContainerID: "abc", NetNS: "/var/run/netns/cni-1", Namespace: "demo", Pod: "app"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseRedirect(t *testing.T) {
	tests := []struct {
		name, in string
		want     Redirect
		wantErr  bool
	}{
		{name: "uid and gid", in: `{"proxyUID":1337,"proxyGID":1337,"dnsPort":15053}`, want: Redirect{1337, 1337, 15053}},
		{name: "gid only", in: `{"proxyGID":7,"dnsPort":53}`, want: Redirect{ProxyGID: 7, DNSPort: 53}},
		{name: "no owner", in: `{"dnsPort":15053}`, wantErr: true},
		{name: "negative uid", in: `{"proxyUID":-1,"proxyGID":5,"dnsPort":15053}`, wantErr: true},
		{name: "uid too large", in: `{"proxyUID":2147483648,"dnsPort":15053}`, wantErr: true},
		{name: "port zero", in: `{"proxyUID":1}`, wantErr: true},
		{name: "port too large", in: `{"proxyUID":1,"dnsPort":65536}`, wantErr: true},
		{name: "not JSON", in: `uid=1`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRedirect(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err == nil {
				if back, err := ParseRedirect(got.String()); err != nil || back != got {
					t.Errorf("round trip: %v %v", back, err)
				}
			}
		})
	}
}
