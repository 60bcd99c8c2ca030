package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/archtest"
	"github.com/meshdns/meshdns/internal/ociimage"
	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// roleEnv makes the test binary a stand-in upstream DNS server inside a
// network namespace.
const roleEnv = "MESHDNS_IMAGE_TEST_ROLE"

// upstreamA is what the stand-in upstream answers for every A question.
const upstreamA = "192.0.2.53"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "upstream" {
		os.Exit(serveUpstream(os.Getenv("ADDR")))
	}
	code := m.Run()
	meshdnsBuild.Remove()
	agentBuild.Remove()
	os.Exit(code)
}

func serveUpstream(addr string) int {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Name + " 30 IN A " + upstreamA)
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = dns.ActivateAndServe(ln, nil, h) }()
	fmt.Println("ready")
	_ = dns.ActivateAndServe(nil, pc, h)
	return 1
}

// meshdnsBuild is cmd/meshdns built the way `make image` does (static,
// -trimpath) for this machine's architecture, once per test binary.
var meshdnsBuild = &buildtest.Binary{
	Pkg:  "github.com/meshdns/meshdns/cmd/meshdns",
	Args: []string{"-trimpath", "-ldflags", "-X main.version=imagetest"},
	Env:  []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH},
}

// agentBuild is the sidecar's binary, cmd/meshdns-agent, as the
// Makefile's AGENT_BUILD makes it.
var agentBuild = &buildtest.Binary{
	Pkg:  archtest.AgentMain,
	Args: []string{"-trimpath", "-ldflags", "-s -w -X main.version=imagetest"},
	Env:  []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH},
}

// readBuild returns the content of what b built.
func readBuild(t testing.TB, b *buildtest.Binary) []byte {
	t.Helper()
	data, err := os.ReadFile(b.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func testSpec(t testing.TB) ociimage.Meshdns {
	// Uncompressed: gzip of the 40 MB binary under the race detector takes
	// minutes. ociimage's tests cover the compressed layers.
	return ociimage.Meshdns{Name: "localhost/meshdns:test", License: []byte("Apache License 2.0\n"),
		Binaries: []ociimage.Binary{{Platform: ociimage.Platform{OS: "linux", Architecture: runtime.GOARCH},
			Data: readBuild(t, meshdnsBuild), Agent: readBuild(t, agentBuild)}}}
}

// imageFiles returns the layer of the layout's first image, by path.
func imageFiles(t testing.TB, l *ociimage.Layout) (v1.ConfigFile, map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	var docker []struct {
		Config string
		Layers []string
	}
	mustJSON(t, l.File("manifest.json"), &docker)
	var cfg v1.ConfigFile
	mustJSON(t, l.File(docker[0].Config), &cfg)
	var layer io.Reader = bytes.NewReader(l.File(docker[0].Layers[0]))
	if b := l.File(docker[0].Layers[0]); len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		layer = zr
	}
	headers, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(layer)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(h.Name, "/")
		headers[name] = h
		data[name], _ = io.ReadAll(tr)
	}
	return cfg, headers, data
}

// TestImage checks what the image holds and how it starts: the static
// binary as the entrypoint, a non-root user, no shell or any other
// program; and that two builds give the same digest.
func TestImage(t *testing.T) {
	spec := testSpec(t)
	l1, err := spec.Index().Build()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := testSpec(t).Index().Build()
	if err != nil {
		t.Fatal(err)
	}
	if l1.Digest() != l2.Digest() {
		t.Errorf("two builds: %s and %s", l1.Digest(), l2.Digest())
	}

	cfg, headers, data := imageFiles(t, l1)
	if diff := cmp.Diff([]string{ociimage.MeshdnsBinary}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want the numeric non-root 65532:65532", cfg.Config.User)
	}
	if !slices.Contains(cfg.Config.Env, "PATH=/usr/local/bin") {
		t.Errorf("env %q lacks PATH=/usr/local/bin (manifests run command [meshdns])", cfg.Config.Env)
	}
	if cfg.Config.Labels["org.opencontainers.image.version"] != "test" || cfg.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels %v", cfg.Config.Labels)
	}
	var paths, executables []string
	for p, h := range headers {
		paths = append(paths, p)
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			executables = append(executables, p)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d, mtime %v; want 0:0 at the epoch", p, h.Uid, h.Gid, h.ModTime)
		}
	}
	slices.Sort(paths)
	want := []string{"/etc", "/etc/group", "/etc/nsswitch.conf", "/etc/passwd", "/tmp", "/usr", "/usr/local", "/usr/local/bin",
		"/usr/local/bin/meshdns", "/usr/local/bin/meshdns-agent", "/usr/share", "/usr/share/doc", "/usr/share/doc/meshdns", "/usr/share/doc/meshdns/LICENSE"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("image files (-want +got):\n%s", diff)
	}
	slices.Sort(executables)
	if diff := cmp.Diff([]string{ociimage.MeshdnsBinary, ociimage.AgentBinary}, executables); diff != "" {
		t.Errorf("executables (-want +got); no shell or other program belongs in the image:\n%s", diff)
	}
	if headers["/tmp"].Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", headers["/tmp"].Mode)
	}
	for _, bin := range []string{ociimage.MeshdnsBinary, ociimage.AgentBinary} {
		f, err := elf.NewFile(bytes.NewReader(data[bin]))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (%v); the image has no libc", bin, p.Type)
			}
		}
	}
	// The sidecar's binary is the agent build, not a copy of meshdns.
	info, err := buildinfo.Read(bytes.NewReader(data[ociimage.AgentBinary]))
	if err != nil {
		t.Fatalf("%s: %v", ociimage.AgentBinary, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if info.Path != archtest.AgentMain || settings["CGO_ENABLED"] != "0" {
		t.Errorf("%s is %s built with CGO_ENABLED=%q, want %s with CGO_ENABLED=0", ociimage.AgentBinary, info.Path, settings["CGO_ENABLED"], archtest.AgentMain)
	}
	if len(data[ociimage.AgentBinary]) >= len(data[ociimage.MeshdnsBinary])/2 {
		t.Errorf("%s is %d bytes, meshdns %d: want less than half", ociimage.AgentBinary, len(data[ociimage.AgentBinary]), len(data[ociimage.MeshdnsBinary]))
	}
}

// TestRunPairsBinaries: every platform needs both binaries, since the
// injected sidecar runs meshdns-agent.
func TestRunPairsBinaries(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	writeFile(t, bin, "not really a binary")
	common := []string{"-license", "../../LICENSE", "-layout", filepath.Join(dir, "oci"), "-archive", filepath.Join(dir, "a.tar"), "-gzip=false"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "meshdns without the agent", args: []string{"-binary", "linux/amd64=" + bin}, want: "-binary linux/amd64 has no -agent-binary linux/amd64=PATH"},
		{name: "agent of another platform", args: []string{"-binary", "linux/amd64=" + bin, "-agent-binary", "linux/arm64=" + bin}, want: "-binary linux/amd64 has no -agent-binary"},
		{name: "agent without meshdns", args: []string{"-binary", "linux/amd64=" + bin, "-agent-binary", "linux/amd64=" + bin, "-agent-binary", "linux/arm64=" + bin}, want: "-agent-binary linux/arm64 has no -binary linux/arm64=PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(append(tc.args, common...), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestImageCapture runs the image's own binaries, chrooted into the image's
// files so that no program of this machine is within reach, as the init
// container (meshdns) and the sidecar (meshdns-agent) of a pod, in a network namespace the test
// creates: `meshdns iptables apply` writes the capture with nftables over
// netlink (auto finds no iptables tools), the agent answers the
// redirected queries of dig over UDP and TCP from its table, forwards
// the rest to the nameserver (its uid bypasses the redirect), and
// `meshdns iptables clean` gives DNS back to the nameserver.
func TestImageCapture(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	digPath, chroot := testenv.RequireTool(t, "dig"), testenv.RequireTool(t, "chroot")
	l, err := testSpec(t).Index().Build()
	if err != nil {
		t.Fatal(err)
	}
	_, headers, data := imageFiles(t, l)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, h := range headers {
		dst := filepath.Join(root, p)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
				t.Fatal(err)
			}
			_ = os.Chmod(dst, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data[p], os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	// What the kubelet mounts into a pod: its resolv.conf, here with the
	// stand-in nameserver; and a table for the agent, here a file.
	writeFile(t, filepath.Join(root, "etc/resolv.conf"), "nameserver 198.18.0.1\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	table, err := os.ReadFile("../../examples/nametable.json")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "etc/meshdns/nametable.json"), string(table))

	pod, dnsNS := netnstest.New(t, "mdimg"), netnstest.New(t, "mdimg")
	netnstest.Veth(t, pod, "198.18.0.2/24", dnsNS, "198.18.0.1/24")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	netnstest.Start(t, []string{roleEnv + "=upstream", "ADDR=198.18.0.1:53"}, "ip", "netns", "exec", dnsNS, self)

	inPod := func(args ...string) (string, error) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", pod}, args...)...)
		cmd.Env = []string{} // nothing from this machine, PATH included
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	dig := func(args ...string) string {
		t.Helper()
		out, err := inPod(append([]string{digPath, "+time=2", "+tries=1", "+noall", "+answer", "+comments", "@198.18.0.1"}, args...)...)
		if err != nil {
			t.Fatalf("dig %q: %v: %s", args, err, out)
		}
		return out
	}
	initContainer := []string{chroot, root, ociimage.MeshdnsBinary, "iptables"}
	if out, err := inPod(append(initContainer, "apply", "--proxy-uid", "1337", "--proxy-gid", "1337")...); err != nil {
		t.Fatalf("meshdns iptables apply from the image: %v: %s", err, out)
	} else if !strings.Contains(out, "nftables rules applied") {
		t.Errorf("apply output %q does not say the native backend was used", out)
	}
	netnstest.StartBackground(t, nil, "ip", "netns", "exec", pod, chroot, "--userspec=1337:1337", root, ociimage.AgentBinary, "agent",
		"--nametable-file", "/etc/meshdns/nametable.json", "--namespace", "demo")
	testenv.Eventually(t, "agent answers", 20*time.Second, func() bool {
		out, _ := inPod(digPath, "+time=1", "+tries=1", "+short", "@198.18.0.1", "web.demo.svc.cluster.local")
		return strings.Contains(out, "10.96.0.20")
	})

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "table name over udp", args: []string{"web.demo.svc.cluster.local"}, want: []string{"flags: qr aa", "10.96.0.20"}},
		{name: "table name over tcp", args: []string{"+tcp", "web.demo.svc.cluster.local"}, want: []string{"flags: qr aa", "10.96.0.20"}},
		{name: "short name from the search list", args: []string{"+search", "web"}, want: []string{"10.96.0.20"}},
		{name: "other names forwarded to the nameserver", args: []string{"example.org"}, want: []string{upstreamA}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := dig(tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("dig %q:\n%s\nwant %q", tc.args, out, w)
				}
			}
		})
	}

	if out, err := inPod(append(initContainer, "clean")...); err != nil {
		t.Fatalf("meshdns iptables clean from the image: %v: %s", err, out)
	}
	if out := dig("web.demo.svc.cluster.local"); !strings.Contains(out, upstreamA) {
		t.Errorf("after clean the nameserver should answer:\n%s", out)
	}
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}
