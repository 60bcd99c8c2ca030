// Package archtest enforces the dependency arrows of docs/design.md (Layout):
// the layout table is only worth something if a test fails when an import
// breaks it.
package archtest

import (
	"fmt"
	"slices"
	"strings"
)

// Module is the module path every rule is relative to.
const Module = "github.com/meshdns/meshdns"

// Package is the part of `go list -deps -json` output the rules need.
type Package struct {
	ImportPath   string
	Standard     bool
	Imports      []string // direct, non-test
	Deps         []string // transitive, non-test
	TestImports  []string
	XTestImports []string
}

// under reports whether path is prefix or a package below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// own returns the module-relative path of an import path of the module
// ("pkg/nametable"), or "" for packages of other modules.
func own(path string) string {
	switch {
	case path == Module:
		return "."
	case strings.HasPrefix(path, Module+"/"):
		return strings.TrimPrefix(path, Module+"/")
	}
	return ""
}

// forbidden lists import path prefixes a layer must not depend on, even
// indirectly.
var forbidden = []struct {
	layer string   // module-relative path prefix the rule applies to
	not   []string // import path prefixes it must not reach
	why   string
}{
	{
		layer: "pkg",
		not:   []string{Module + "/proto", "google.golang.org/grpc", "k8s.io/client-go", Module + "/agent", Module + "/controlplane", Module + "/cmd"},
		why:   "pkg/* is pure domain code: only agent/ and controlplane/ convert wire and Kubernetes types",
	},
	{
		layer: "iptables",
		not:   []string{Module + "/proto", "google.golang.org/grpc", "k8s.io/client-go", Module + "/agent", Module + "/controlplane", Module + "/cmd", Module + "/pkg"},
		why:   "iptables/ knows no DNS library and no wire types",
	},
	{
		layer: "proto",
		not:   []string{Module + "/pkg", Module + "/agent", Module + "/controlplane", Module + "/iptables", Module + "/cmd", Module + "/internal"},
		why:   "the generated protocol code imports no meshdns package",
	},
	{
		layer: "agent",
		not:   []string{Module + "/controlplane", Module + "/cmd"},
		why:   "the agent and the control plane only meet through the protocol",
	},
	{
		layer: "controlplane",
		not:   []string{Module + "/agent", Module + "/cmd"},
		why:   "the agent and the control plane only meet through the protocol",
	},
}

// protowire is google.golang.org/protobuf/encoding/protowire with what it
// imports: the only part of the protobuf module the agent's own codec
// (internal/namewire) uses.
var protowire = []string{
	"google.golang.org/protobuf/encoding/protowire",
	"google.golang.org/protobuf/internal/errors",
	"google.golang.org/protobuf/internal/detrand",
}

// onlyImports lists layers whose direct (non-test) imports are limited to
// the standard library plus a few allowed prefixes.
var onlyImports = []struct {
	layer  string
	except []string // module-relative packages under layer with a rule of their own
	allow  []string // import path prefixes allowed besides the standard library
	deps   bool     // check transitive deps too, not only direct imports
	why    string
}{
	{layer: "pkg/nametable", allow: []string{"github.com/miekg/dns", Module + "/internal/dnsname", "golang.org/x/net/publicsuffix", Module + "/pkg/nametable/internal"}, why: "pkg/nametable is stdlib plus miekg/dns types (and the one hostname check, the Public Suffix List and its own internal packages)"},
	{layer: "pkg/policy", allow: []string{"github.com/miekg/dns", Module + "/internal/dnsname"}, why: "pkg/policy is stdlib plus miekg/dns types and the one hostname check"},
	{layer: "pkg/proxy/observe", allow: []string{"github.com/miekg/dns", "golang.org/x/sys", Module + "/internal/dnswire", Module + "/pkg/metric", Module + "/pkg/policy", Module + "/pkg/proxy/upstream"},
		why: "pkg/proxy/observe is the proxy's observer: it sits below pkg/proxy, which hands it one outcome per query, and knows no table, cache or listener"},
	{layer: "internal/dnswire", allow: []string{"github.com/miekg/dns"},
		why: "internal/dnswire is byte-level DNS shared by pkg/proxy and its upstream: stdlib plus miekg/dns record types, no meshdns package"},
	{layer: "pkg/metric", deps: true, why: "pkg/metric is the public packages' metrics contract: the standard library only, so pkg/proxy and pkg/proxy/upstream can share it without a cycle and callers adapt any metrics library to it"},
	{layer: "internal/metrics", deps: true, why: "internal/metrics is the agent's own Prometheus client: the standard library only, so metrics cost the sidecar no library's pages"},
	{layer: "internal/namewire", allow: protowire, deps: true,
		why: "internal/namewire is the one codec of meshdns.v1, the agent's and the control plane's: protowire (and its two internal packages) and the standard library, never the protobuf runtime or the generated code (the agent links it)"},
	{layer: "pkg/dnstap", allow: protowire, deps: true,
		why: "pkg/dnstap is the agent's dnstap writer: protowire (and its two internal packages) and the standard library, never the protobuf runtime"},
	{layer: "internal/resolvconf", deps: true, why: "iptables/ imports internal/resolvconf, so it uses the standard library only"},
	{layer: "internal/adminhttp", allow: []string{Module + "/internal/loopback"}, deps: true,
		why: "internal/adminhttp is the agent's and the control plane's admin toolkit: the standard library and internal/loopback only, so the sidecar links nothing more for it"},
	{layer: "internal/grpcstream", deps: true, why: "internal/grpcstream is the agent's gRPC client on net/http's HTTP/2: the standard library only, so the stream costs the sidecar no gRPC library's pages"},
	{layer: "iptables", except: []string{"iptables/nft"}, allow: []string{Module + "/iptables", Module + "/internal/resolvconf"}, deps: true, why: "iptables/ uses the standard library only (internal/resolvconf is stdlib-only too)"},
	{
		layer: "iptables/nft",
		allow: []string{Module + "/iptables", Module + "/internal/resolvconf", "github.com/google/nftables", "github.com/mdlayher/netlink", "github.com/mdlayher/socket",
			"golang.org/x/sys", "golang.org/x/net/bpf", "golang.org/x/sync"},
		deps: true,
		why:  "iptables/nft is the iptables model written over netlink: the netfilter library and nothing else",
	},
	{layer: "cni", allow: []string{Module + "/cni", Module + "/iptables", Module + "/internal/resolvconf", Module + "/internal/atomicfile", "golang.org/x/sys"}, deps: true,
		why: "cni/ is the node's CNI plugin: the standard library, iptables, x/sys and the atomic file writer only (the Kubernetes lookup is injected by the command)"},
}

// wireOwned lists layers that read and write meshdns.v1 only through
// internal/namewire, the format's one codec for both sides: their non-test
// code does not import protowire itself.
var wireOwned = []string{"agent", "controlplane", "cmd", testkit + "/loadagent"}

const wireWhy = "meshdns.v1 is encoded and decoded in internal/namewire only, fuzzed there against the generated code"

// testkit is the room of the test harnesses (a real API server, a node,
// network namespaces, certificates, load agents): nothing that ships links
// it, so the layout shows what ships.
const testkit = "internal/testkit"

// testRooms are the layers whose non-test code may use the test kit: the kit
// itself, the end-to-end suites, the benchmark tools and the repository's own
// checks.
var testRooms = []string{testkit, "e2e", "hack", "internal/archtest", "internal/readmetest", "docs"}

const testkitWhy = "internal/testkit holds test harnesses: only tests, e2e/ and hack/ use them"

// lean lists import path prefixes a layer's non-test code must not depend
// on, even indirectly; its tests may.
var lean = []struct {
	layer string
	not   []string
	why   string
}{
	{
		layer: "cmd",
		not:   []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers"},
		why: "every process of the one binary, each pod's agent included, would pay for the clientset's scheme of every API group " +
			"(15 MB more RSS, a binary twice the size): controlplane/kubesource watches through REST clients on a scheme of the types it reads",
	},
	{
		layer: "pkg",
		not:   []string{Module + "/internal/metrics"},
		why: "pkg/* counts with pkg/metric, one way for the proxy, its observer and its upstream; the agent's internal/metrics " +
			"stands behind them only through internal/proxymetrics (tests may read their metrics on its registry)",
	},
}

// Violations checks pkgs (the output of go list -deps -json ./... for the
// module) against the rules and returns one line per broken arrow, sorted.
func Violations(pkgs []Package) []string {
	std := make(map[string]bool, len(pkgs))
	for _, p := range pkgs {
		if p.Standard {
			std[p.ImportPath] = true
		}
	}
	var out []string
	for _, p := range pkgs {
		rel := own(p.ImportPath)
		if rel == "" {
			continue
		}
		tests := slices.Concat(p.TestImports, p.XTestImports)
		for _, r := range forbidden {
			if !under(rel, r.layer) {
				continue
			}
			for _, bad := range r.not {
				if under(p.ImportPath, bad) {
					continue // a package may use its own subpackages
				}
				for _, d := range p.Deps {
					if under(d, bad) {
						out = append(out, fmt.Sprintf("%s depends on %s: %s", rel, d, r.why))
					}
				}
				for _, d := range tests {
					if under(d, bad) && !under(d, p.ImportPath) {
						out = append(out, fmt.Sprintf("%s tests import %s: %s", rel, d, r.why))
					}
				}
			}
		}
		for _, r := range lean {
			if !under(rel, r.layer) {
				continue
			}
			for _, bad := range r.not {
				// One line per prefix, not per package (the clientset
				// alone is a hundred): the first in import path order,
				// the prefix itself when it is linked.
				if i := slices.IndexFunc(p.Deps, func(d string) bool { return under(d, bad) }); i >= 0 {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", rel, p.Deps[i], r.why))
				}
			}
		}
		for _, r := range onlyImports {
			if !under(rel, r.layer) || slices.ContainsFunc(r.except, func(e string) bool { return under(rel, e) }) {
				continue
			}
			list := p.Imports
			if r.deps {
				list = p.Deps
			}
			for _, d := range list {
				if std[d] || isStdPath(d) || slices.ContainsFunc(r.allow, func(a string) bool { return under(d, a) }) {
					continue
				}
				out = append(out, fmt.Sprintf("%s imports %s: %s", rel, d, r.why))
			}
		}
		if slices.ContainsFunc(wireOwned, func(l string) bool { return under(rel, l) }) && slices.Contains(p.Imports, protowire[0]) {
			out = append(out, fmt.Sprintf("%s imports %s: %s", rel, protowire[0], wireWhy))
		}
		if !slices.ContainsFunc(testRooms, func(l string) bool { return under(rel, l) }) {
			for _, d := range p.Deps {
				if under(d, Module+"/"+testkit) {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", rel, d, testkitWhy))
				}
			}
		}
		// Nothing imports the command: it is the top of the graph.
		if !under(rel, "cmd") {
			for _, d := range slices.Concat(p.Deps, tests) {
				if under(d, Module+"/cmd") {
					out = append(out, fmt.Sprintf("%s depends on %s: nothing imports cmd/", rel, d))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// isStdPath is the go command's own test for a standard-library path: no
// dot in the first element. It covers deps go list did not describe.
func isStdPath(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// AgentMain is the main package of the sidecar's binary, meshdns-agent,
// which the Makefile's AGENT_BUILD builds with CGO_ENABLED=0: the agent and
// version commands only, without the control plane, the webhook, the
// Kubernetes client code and the init container's iptables command. Every
// pod's agent maps the pages of what its binary links and initialises.
const AgentMain = Module + "/cmd/meshdns-agent"

// agentBuildNot lists what the agent build must not link: a package path
// and what is below it, or, ending in "/", every module of a host; with
// what it is, for the failure message.
var agentBuildNot = []struct{ path, what string }{
	{Module + "/controlplane", "the control plane"},
	{"k8s.io/", "Kubernetes client code"},
	{"sigs.k8s.io/", "Kubernetes client code"},
	{"gopkg.in/yaml.v3", "a YAML library (entries files, templates)"},
	{"go.yaml.in/", "a YAML library (entries files, templates)"},
	{Module + "/iptables/nft", "the init container's native nftables backend"},
	{"github.com/google/nftables", "the init container's native nftables backend"},
	{"github.com/mdlayher/", "netlink, for the native nftables backend"},
	{"golang.org/x/net/trace", "request tracing and the templates it pulls in"},
	{"html/template", "templates (nothing the agent serves is a template)"},
	{"text/template", "templates (nothing the agent serves is a template)"},
	{"runtime/cgo", "cgo, and with it libc's pages (build with CGO_ENABLED=0)"},
	{"github.com/prometheus/", "the Prometheus client and its protobuf data model (the agent's metrics are internal/metrics)"},
	{Module + "/proto", "the generated protocol code and with it the protobuf runtime (the agent's codec is internal/namewire)"},
	{"google.golang.org/grpc", "grpc-go, and the protobuf runtime it links (the agent's stream is internal/grpcstream, on net/http's HTTP/2)"},
	{"golang.org/x/net/http2", "x/net's HTTP/2, a second copy of what net/http bundles (grpc-go's transport used it)"},
}

// agentBin names the agent build in failure messages.
const agentBin = "cmd/meshdns-agent"

// protobufWhy is why the agent build must not link the protobuf runtime:
// its reflection, registry and JSON packages are megabytes of the binary
// for the few messages internal/namewire encodes on protowire.
const protobufWhy = "the protobuf runtime (the agent's messages are internal/namewire, on protowire only)"

// AgentBuildViolations checks the packages of the agent build (go list
// -deps AgentMain, without cgo) and returns one line per
// package the agent does not need, sorted.
//
// The protobuf module is allowed only as protowire; the module's own
// packages never import more of it than that.
func AgentBuildViolations(pkgs []Package) []string {
	runtime := func(path string) bool {
		return under(path, "google.golang.org/protobuf") && !slices.Contains(protowire, path)
	}
	var out []string
	for _, p := range pkgs {
		if runtime(p.ImportPath) {
			out = append(out, fmt.Sprintf("the agent build (%s) links %s, %s: the sidecar carries only what the agent needs", agentBin, p.ImportPath, protobufWhy))
		}
		if own(p.ImportPath) != "" {
			for _, imp := range p.Imports {
				if runtime(imp) {
					out = append(out, fmt.Sprintf("the agent build (%s): %s imports %s, %s", agentBin, p.ImportPath, imp, protobufWhy))
				}
			}
		}
		for _, bad := range agentBuildNot {
			host := strings.HasSuffix(bad.path, "/") && strings.HasPrefix(p.ImportPath, bad.path)
			if host || under(p.ImportPath, bad.path) {
				out = append(out, fmt.Sprintf("the agent build (%s) links %s, %s: the sidecar carries only what the agent needs", agentBin, p.ImportPath, bad.what))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
