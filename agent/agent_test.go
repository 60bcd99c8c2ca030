package agent

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestServeExampleTable(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)

	tests := []struct {
		name      string
		qname     string
		qtype     uint16
		wantRcode int
		want      []string
	}{
		{
			name: "service by its full name", qname: "web.demo.svc.cluster.local", qtype: dns.TypeA,
			want: []string{"web.demo.svc.cluster.local. A 10.96.0.20"},
		},
		{
			name: "service by its bare name in the same namespace", qname: "web", qtype: dns.TypeAAAA,
			want: []string{"web. AAAA fd00:10:96::20"},
		},
		{
			name: "case is echoed", qname: "WEB.Demo.svc.cluster.local", qtype: dns.TypeA,
			want: []string{"WEB.Demo.svc.cluster.local. A 10.96.0.20"},
		},
		{
			name: "headless service has one record per endpoint", qname: "db.demo.svc.cluster.local", qtype: dns.TypeA,
			want: []string{"db.demo.svc.cluster.local. A 10.244.1.10", "db.demo.svc.cluster.local. A 10.244.2.11"},
		},
		{
			name: "SRV of a named port", qname: "_http._tcp.web.demo.svc.cluster.local", qtype: dns.TypeSRV,
			want: []string{"_http._tcp.web.demo.svc.cluster.local. SRV 0 100 80 web.demo.svc.cluster.local."},
		},
		{
			name: "wildcard", qname: "anything.corp.example", qtype: dns.TypeA,
			want: []string{"anything.corp.example. A 192.0.2.10"},
		},
		{
			name: "search-path expansion of a File name", qname: "api.example.internal.demo.svc.cluster.local", qtype: dns.TypeA,
			want: []string{
				"api.example.internal. A 10.1.2.3",
				"api.example.internal.demo.svc.cluster.local. CNAME api.example.internal.",
			},
		},
		{
			name: "ExternalName chased upstream", qname: "search.demo.svc.cluster.local", qtype: dns.TypeA,
			want: []string{"search.demo.svc.cluster.local. CNAME www.example.com.", "www.example.com. A 192.0.2.81"},
		},
		{
			name: "unknown name in the cluster zone", qname: "nothere.demo.svc.cluster.local", qtype: dns.TypeA,
			wantRcode: dns.RcodeNameError,
		},
		{
			name: "external name forwarded", qname: "example.com", qtype: dns.TypeA,
			want: []string{"example.com. A 192.0.2.80"},
		},
		{
			name: "external NXDOMAIN forwarded", qname: "nothere.example.net", qtype: dns.TypeA,
			wantRcode: dns.RcodeNameError,
		},
	}
	for _, proto := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				m := exchange(t, proto, a.dns, tt.qname, tt.qtype)
				if m.Rcode != tt.wantRcode {
					t.Errorf("rcode = %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.wantRcode])
				}
				if diff := cmp.Diff(tt.want, answerData(m)); diff != "" {
					t.Errorf("answer (-want +got)\n%s", diff)
				}
			})
		}
	}
	if got := a.run.tables.Current().Names; got != 5 {
		t.Errorf("names served = %v, want 5", got)
	}
}

func TestDig(t *testing.T) {
	dig := testenv.RequireTool(t, "dig")
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)
	host, port, _ := strings.Cut(a.dns, ":")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "table answer over udp", args: []string{"+short", "web.demo.svc.cluster.local"}, want: "10.96.0.20\n"},
		{name: "table answer over tcp", args: []string{"+short", "+tcp", "web.demo", "AAAA"}, want: "fd00:10:96::20\n"},
		{name: "forwarded", args: []string{"+short", "example.com"}, want: "192.0.2.80\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"@" + host, "-p", port, "+time=2", "+tries=1"}, tt.args...)
			out, err := exec.Command(dig, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("dig %v: %v\n%s", args, err, out)
			}
			if diff := cmp.Diff(tt.want, string(out)); diff != "" {
				t.Errorf("dig output (-want +got)\n%s", diff)
			}
		})
	}
}

func TestNoTableSourceForwards(t *testing.T) {
	up := startUpstream(t)
	a := startAgent(t, Config{Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)
	m := exchange(t, "udp", a.dns, "example.com", dns.TypeA)
	if diff := cmp.Diff([]string{"example.com. A 192.0.2.80"}, answerData(m)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestListenTwiceAndClose(t *testing.T) {
	up := startUpstream(t)
	a, err := New(Config{Upstreams: []string{up.addr}, DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "127.0.0.1:0",
		ResolvConf: writeFile(t, t.TempDir(), "resolv.conf", "nameserver 127.0.0.1\n"), Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err == nil {
		t.Error("second Listen succeeded")
	}
	addr := a.AdminAddr().String()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The admin port is free again.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("admin port still taken after Close: %v", err)
	}
	l.Close()
}

func TestListenErrors(t *testing.T) {
	up := startUpstream(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	resolv := writeFile(t, t.TempDir(), "resolv.conf", "nameserver 127.0.0.1\n")
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "admin port taken", cfg: Config{AdminAddr: taken.Addr().String()}, wantErr: "admin"},
		{name: "no resolv.conf", cfg: Config{ResolvConf: "/nonexistent/resolv.conf"}, wantErr: "read resolv.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Upstreams = []string{up.addr}
			cfg.DNSAddrs = []string{"127.0.0.1:0"}
			if cfg.AdminAddr == "" {
				cfg.AdminAddr = "127.0.0.1:0"
			}
			if cfg.ResolvConf == "" {
				cfg.ResolvConf = resolv
			}
			cfg.Logger = quietLogger(t)
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = a.Listen()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Listen = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
