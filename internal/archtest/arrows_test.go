package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const m = Module + "/"

func TestViolations(t *testing.T) {
	std := []Package{{ImportPath: "fmt", Standard: true}, {ImportPath: "net", Standard: true}}
	tests := []struct {
		name string
		pkgs []Package
		want []string
	}{
		{
			name: "clean graph",
			pkgs: []Package{
				{ImportPath: m + "pkg/nametable", Imports: []string{"fmt", "github.com/miekg/dns"}, Deps: []string{"fmt", "github.com/miekg/dns", "golang.org/x/net/ipv4"}, TestImports: []string{"github.com/google/go-cmp/cmp"}},
				{ImportPath: m + "pkg/proxy", Imports: []string{m + "pkg/nametable"}, Deps: []string{m + "pkg/nametable", "github.com/prometheus/client_golang/prometheus"}},
				{ImportPath: m + "iptables", Imports: []string{"fmt", m + "iptables/internal"}, Deps: []string{"fmt", m + "iptables/internal"}},
				{ImportPath: m + "agent", Deps: []string{m + "proto/meshdns/v1", m + "pkg/proxy", m + "iptables", "google.golang.org/grpc"}},
				{ImportPath: m + "controlplane/server", Deps: []string{m + "controlplane/registry", "k8s.io/client-go/kubernetes"}},
				{ImportPath: m + "cmd/meshdns", Deps: []string{m + "agent", m + "controlplane/server", m + "cmd/meshdns/internal"}},
				{ImportPath: m + "proto/meshdns/v1", Deps: []string{"google.golang.org/protobuf/proto"}},
			},
		},
		{
			name: "shipped code linking a test harness",
			pkgs: []Package{
				{ImportPath: m + "agent/ingest", Deps: []string{m + "internal/testkit/testenv"}, XTestImports: []string{m + "internal/testkit/kubetest"}},
				{ImportPath: m + "e2e/internal/kubestack", Deps: []string{m + "internal/testkit/kubetest"}},
				{ImportPath: m + "hack/agentload", Deps: []string{m + "internal/testkit/loadagent"}},
			},
			want: []string{"agent/ingest depends on github.com/meshdns/meshdns/internal/testkit/testenv: " + testkitWhy},
		},
		{
			name: "pkg reaching grpc through another package",
			pkgs: []Package{{ImportPath: m + "pkg/proxy", Imports: []string{"example.com/wrapper"}, Deps: []string{"example.com/wrapper", "google.golang.org/grpc"}}},
			want: []string{"pkg/proxy depends on google.golang.org/grpc: pkg/* is pure domain code: only agent/ and controlplane/ convert wire and Kubernetes types"},
		},
		{
			name: "pkg importing the proto package",
			pkgs: []Package{{ImportPath: m + "pkg/proxy", Deps: []string{m + "proto/meshdns/v1"}}},
			want: []string{"pkg/proxy depends on github.com/meshdns/meshdns/proto/meshdns/v1: pkg/* is pure domain code: only agent/ and controlplane/ convert wire and Kubernetes types"},
		},
		{
			name: "pkg test importing client-go",
			pkgs: []Package{{ImportPath: m + "pkg/proxy", XTestImports: []string{"k8s.io/client-go/kubernetes"}}},
			want: []string{"pkg/proxy tests import k8s.io/client-go/kubernetes: pkg/* is pure domain code: only agent/ and controlplane/ convert wire and Kubernetes types"},
		},
		{
			name: "nametable importing a third-party module",
			pkgs: []Package{{ImportPath: m + "pkg/nametable", Imports: []string{"fmt", "github.com/google/uuid"}}},
			want: []string{"pkg/nametable imports github.com/google/uuid: pkg/nametable is stdlib plus miekg/dns types (and the one hostname check, the Public Suffix List and its own internal packages)"},
		},
		{
			name: "the proxy's observer importing the proxy",
			pkgs: []Package{{ImportPath: m + "pkg/proxy/observe", Imports: []string{"fmt", m + "pkg/proxy/upstream", m + "pkg/proxy"}}},
			want: []string{"pkg/proxy/observe imports " + m + "pkg/proxy: pkg/proxy/observe is the proxy's observer: it sits below pkg/proxy, which hands it one outcome per query, and knows no table, cache or listener"},
		},
		{
			name: "dnswire importing the table",
			pkgs: []Package{{ImportPath: m + "internal/dnswire", Imports: []string{"encoding/binary", "github.com/miekg/dns", m + "pkg/nametable"}}},
			want: []string{"internal/dnswire imports " + m + "pkg/nametable: internal/dnswire is byte-level DNS shared by pkg/proxy and its upstream: stdlib plus miekg/dns record types, no meshdns package"},
		},
		{
			name: "iptables depending on a DNS library",
			pkgs: withStd(std, Package{ImportPath: m + "iptables", Deps: []string{"fmt", "github.com/miekg/dns"}}),
			want: []string{"iptables imports github.com/miekg/dns: iptables/ uses the standard library only (internal/resolvconf is stdlib-only too)"},
		},
		{
			name: "cni depending on client-go",
			pkgs: withStd(std, Package{ImportPath: m + "cni", Deps: []string{"fmt", m + "iptables", "golang.org/x/sys/unix", "k8s.io/client-go/rest"}}),
			want: []string{"cni imports k8s.io/client-go/rest: cni/ is the node's CNI plugin: the standard library, iptables, x/sys and the atomic file writer only (the Kubernetes lookup is injected by the command)"},
		},
		{
			name: "the agent's gRPC client linking grpc-go",
			pkgs: withStd(std, Package{ImportPath: m + "internal/grpcstream", Deps: []string{"net", "golang.org/x/net/http2", "google.golang.org/grpc"}, TestImports: []string{"google.golang.org/grpc"}}),
			want: []string{
				"internal/grpcstream imports golang.org/x/net/http2: internal/grpcstream is the agent's gRPC client on net/http's HTTP/2: the standard library only, so the stream costs the sidecar no gRPC library's pages",
				"internal/grpcstream imports google.golang.org/grpc: internal/grpcstream is the agent's gRPC client on net/http's HTTP/2: the standard library only, so the stream costs the sidecar no gRPC library's pages",
			},
		},
		{
			name: "proto importing a meshdns package",
			pkgs: []Package{{ImportPath: m + "proto/meshdns/v1", Deps: []string{m + "pkg/nametable"}}},
			want: []string{"proto/meshdns/v1 depends on github.com/meshdns/meshdns/pkg/nametable: the generated protocol code imports no meshdns package"},
		},
		{
			name: "agent importing the control plane",
			pkgs: []Package{{ImportPath: m + "agent", Deps: []string{m + "controlplane/registry"}}},
			want: []string{"agent depends on github.com/meshdns/meshdns/controlplane/registry: the agent and the control plane only meet through the protocol"},
		},
		{
			name: "control plane importing the agent",
			pkgs: []Package{{ImportPath: m + "controlplane/view", Deps: []string{m + "agent/discovery"}}},
			want: []string{"controlplane/view depends on github.com/meshdns/meshdns/agent/discovery: the agent and the control plane only meet through the protocol"},
		},
		{
			name: "agent reading the protocol with protowire itself",
			pkgs: []Package{{ImportPath: m + "agent/discovery", Imports: []string{"google.golang.org/protobuf/encoding/protowire", m + "internal/namewire"}}},
			want: []string{"agent/discovery imports google.golang.org/protobuf/encoding/protowire: meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"},
		},
		{
			name: "control plane view encoding with protowire itself",
			pkgs: []Package{{ImportPath: m + "controlplane/view", Imports: []string{"google.golang.org/protobuf/encoding/protowire"}, TestImports: []string{"google.golang.org/protobuf/proto"}}},
			want: []string{"controlplane/view imports google.golang.org/protobuf/encoding/protowire: meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"},
		},
		{
			name: "control plane server adding settings with protowire itself",
			pkgs: []Package{{ImportPath: m + "controlplane/server", Imports: []string{"google.golang.org/protobuf/encoding/protowire", m + "internal/namewire"}}},
			want: []string{"controlplane/server imports google.golang.org/protobuf/encoding/protowire: meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"},
		},
		{
			name: "safe mode reading the state file with protowire itself",
			pkgs: []Package{{ImportPath: m + "cmd/internal/safemode", Imports: []string{"google.golang.org/protobuf/encoding/protowire", m + "internal/namewire"}}},
			want: []string{"cmd/internal/safemode imports google.golang.org/protobuf/encoding/protowire: meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"},
		},
		{
			name: "load agent reading responses with protowire itself",
			pkgs: []Package{{ImportPath: m + "internal/testkit/loadagent", Imports: []string{"google.golang.org/protobuf/encoding/protowire"}}},
			want: []string{"internal/testkit/loadagent imports google.golang.org/protobuf/encoding/protowire: meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"},
		},
		{
			name: "tests of the agent may read the wire",
			pkgs: []Package{{ImportPath: m + "agent/discovery", TestImports: []string{"google.golang.org/protobuf/encoding/protowire"}}},
		},
		{
			name: "binary linking the clientset through a control plane package",
			pkgs: []Package{{ImportPath: m + "cmd/meshdns", Deps: []string{m + "controlplane/kubesource", "k8s.io/client-go/informers/core/v1", "k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme", "k8s.io/client-go/rest"}}},
			want: []string{
				"cmd/meshdns depends on k8s.io/client-go/informers/core/v1: " + leanWhy,
				"cmd/meshdns depends on k8s.io/client-go/kubernetes: " + leanWhy,
			},
		},
		{
			name: "binary on REST clients, tests on the clientset",
			pkgs: []Package{{ImportPath: m + "cmd/meshdns", Deps: []string{"k8s.io/client-go/rest", "k8s.io/client-go/tools/cache"}, TestImports: []string{"k8s.io/client-go/kubernetes/fake"}}},
		},
		{
			name: "the upstream counting with the agent's metrics client",
			pkgs: []Package{{ImportPath: m + "pkg/proxy/upstream", Deps: []string{m + "internal/metrics", m + "pkg/metric"}}},
			want: []string{"pkg/proxy/upstream depends on " + m + "internal/metrics: " + metricsWhy},
		},
		{
			name: "the proxy reaching the agent's metrics client through its observer",
			pkgs: []Package{{ImportPath: m + "pkg/proxy", Imports: []string{m + "pkg/proxy/observe"}, Deps: []string{m + "internal/metrics", m + "pkg/proxy/observe"}}},
			want: []string{"pkg/proxy depends on " + m + "internal/metrics: " + metricsWhy},
		},
		{
			name: "tests of the upstream reading its metrics on the agent's registry",
			pkgs: []Package{{ImportPath: m + "pkg/proxy/upstream", Deps: []string{m + "pkg/metric"}, TestImports: []string{m + "internal/metrics", m + "internal/proxymetrics"}}},
		},
		{
			name: "something importing cmd",
			pkgs: []Package{{ImportPath: m + "internal/testkit/kubetest", Deps: []string{m + "cmd/meshdns"}}},
			want: []string{"internal/testkit/kubetest depends on github.com/meshdns/meshdns/cmd/meshdns: nothing imports cmd/"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Violations(tc.pkgs)); diff != "" {
				t.Errorf("Violations mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

var (
	leanWhy    = lean[0].why
	metricsWhy = lean[1].why
)

func withStd(a []Package, more ...Package) []Package {
	return append(append([]Package(nil), a...), more...)
}

// goList runs go list -e -deps -json at the module root with args, in the
// environment plus env.
func goList(t *testing.T, env []string, args ...string) []Package {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, append([]string{"list", "-e", "-deps", "-json=ImportPath,Standard,Imports,Deps,TestImports,XTestImports"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestAgentBuild checks that the sidecar's binary, cmd/meshdns-agent
// built as the Makefile builds it (without cgo), links none of
// agentBuildNot: no grpc-go, protobuf runtime, Kubernetes client or YAML.
func TestAgentBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := goList(t, []string{"CGO_ENABLED=0"}, AgentMain)
	// Guard against a listing that lost the agent: then nothing is checked.
	for _, want := range []string{Module + "/agent", Module + "/cmd/internal/agentcmd"} {
		if !slices.ContainsFunc(pkgs, func(p Package) bool { return p.ImportPath == want }) {
			t.Fatalf("go list -deps %s does not reach %s (%d packages)", AgentMain, want, len(pkgs))
		}
	}
	if v := AgentBuildViolations(pkgs); len(v) > 0 {
		t.Errorf("%s", strings.Join(v, "\n"))
	}
}

// TestAgentBuildIsTheMakefiles: TestAgentBuild checks what make builds,
// so the Makefile's agent build must build AgentMain without cgo, and
// every rule that uses it must build that package.
func TestAgentBuildIsTheMakefiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	uses := 0
	for line := range strings.Lines(string(b)) {
		if name, value, ok := strings.Cut(line, " := "); ok {
			vars[name] = strings.TrimSpace(value)
		}
		if strings.Contains(line, "$(AGENT_BUILD)") {
			uses++
			if !strings.Contains(line, "$(AGENT_PKG)") {
				t.Errorf("Makefile line %q uses $(AGENT_BUILD) on another package than $(AGENT_PKG)", strings.TrimSpace(line))
			}
		}
	}
	if want := "./" + strings.TrimPrefix(AgentMain, Module+"/"); vars["AGENT_PKG"] != want {
		t.Errorf("Makefile AGENT_PKG = %q, want %q (archtest.AgentMain)", vars["AGENT_PKG"], want)
	}
	if got := vars["AGENT_BUILD"]; !strings.Contains(got, "CGO_ENABLED=0") || strings.Contains(got, "-tags") {
		t.Errorf("Makefile AGENT_BUILD = %q, want CGO_ENABLED=0 and no build tags (the package is the agent build)", got)
	}
	if uses < 2 {
		t.Errorf("Makefile uses $(AGENT_BUILD) %d times, want build and image", uses)
	}
}

func TestAgentBuildViolations(t *testing.T) {
	pkgs := []Package{
		{ImportPath: m + "agent"}, {ImportPath: "google.golang.org/grpc"},
		{ImportPath: m + "controlplane/webhook"}, {ImportPath: "k8s.io/apimachinery/pkg/runtime"},
		{ImportPath: m + "controlplaneish"}, {ImportPath: m + "iptables"}, {ImportPath: m + "iptables/nft"},
		{ImportPath: "github.com/mdlayher/netlink"}, {ImportPath: "golang.org/x/net/trace"}, {ImportPath: "golang.org/x/net/http2"},
		{ImportPath: "html/template"}, {ImportPath: "runtime/cgo"}, {ImportPath: "runtime"},
		{ImportPath: "github.com/prometheus/client_golang/prometheus"}, {ImportPath: m + "internal/metrics"},
	}
	const tail = ": the sidecar carries only what the agent needs"
	want := []string{
		"the agent build (cmd/meshdns-agent) links github.com/mdlayher/netlink, netlink, for the native nftables backend" + tail,
		"the agent build (cmd/meshdns-agent) links github.com/meshdns/meshdns/controlplane/webhook, the control plane" + tail,
		"the agent build (cmd/meshdns-agent) links github.com/meshdns/meshdns/iptables/nft, the init container's native nftables backend" + tail,
		"the agent build (cmd/meshdns-agent) links github.com/prometheus/client_golang/prometheus, the Prometheus client and its protobuf data model (the agent's metrics are internal/metrics)" + tail,
		"the agent build (cmd/meshdns-agent) links golang.org/x/net/http2, x/net's HTTP/2, a second copy of what net/http bundles (grpc-go's transport used it)" + tail,
		"the agent build (cmd/meshdns-agent) links golang.org/x/net/trace, request tracing and the templates it pulls in" + tail,
		"the agent build (cmd/meshdns-agent) links google.golang.org/grpc, grpc-go, and the protobuf runtime it links (the agent's stream is internal/grpcstream, on net/http's HTTP/2)" + tail,
		"the agent build (cmd/meshdns-agent) links html/template, templates (nothing the agent serves is a template)" + tail,
		"the agent build (cmd/meshdns-agent) links k8s.io/apimachinery/pkg/runtime, Kubernetes client code" + tail,
		"the agent build (cmd/meshdns-agent) links runtime/cgo, cgo, and with it libc's pages (build with CGO_ENABLED=0)" + tail,
	}
	if diff := cmp.Diff(want, AgentBuildViolations(pkgs)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The agent build links protowire of the protobuf module and nothing
// more; the module's packages import no more.
func TestAgentBuildProtobuf(t *testing.T) {
	const tail = ", the protobuf runtime (the agent's messages are internal/namewire, on protowire only)"
	const pre = "the agent build (cmd/meshdns-agent)"
	tests := []struct {
		name string
		pkgs []Package
		want []string
	}{
		{
			name: "protowire only",
			pkgs: []Package{{ImportPath: m + "internal/namewire", Imports: []string{"google.golang.org/protobuf/encoding/protowire"}},
				{ImportPath: "google.golang.org/protobuf/encoding/protowire"}, {ImportPath: "google.golang.org/protobuf/internal/errors"}},
		},
		{
			name: "the runtime",
			pkgs: []Package{{ImportPath: "google.golang.org/protobuf/proto"}},
			want: []string{pre + " links google.golang.org/protobuf/proto" + tail + ": the sidecar carries only what the agent needs"},
		},
		{
			name: "an agent package importing the runtime",
			pkgs: []Package{{ImportPath: m + "agent", Imports: []string{"google.golang.org/protobuf/encoding/protojson"}}},
			want: []string{pre + ": github.com/meshdns/meshdns/agent imports google.golang.org/protobuf/encoding/protojson" + tail},
		},
		{
			name: "the generated code",
			pkgs: []Package{{ImportPath: m + "proto/meshdns/v1"}},
			want: []string{pre + " links github.com/meshdns/meshdns/proto/meshdns/v1, the generated protocol code and with it the protobuf runtime (the agent's codec is internal/namewire): the sidecar carries only what the agent needs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, AgentBuildViolations(tt.pkgs), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDependencyArrows runs go list on the whole module and fails on any
// import that breaks the layering of docs/design.md.
func TestDependencyArrows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	pkgs := goList(t, nil, "./...")
	ours := 0
	for _, p := range pkgs {
		if own(p.ImportPath) != "" {
			ours++
		}
	}
	// Guard against a silently empty listing (wrong directory, changed
	// flags): the module has at least its nametable package and command.
	if ours < 2 {
		t.Fatalf("go list found %d module packages; want the whole module", ours)
	}
	t.Logf("checked %d module packages", ours)
	if v := Violations(pkgs); len(v) > 0 {
		t.Errorf("dependency arrows of docs/design.md broken:\n%s", strings.Join(v, "\n"))
	}
}
