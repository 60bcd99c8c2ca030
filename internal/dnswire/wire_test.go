package dnswire

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"
)

func packQuestion(t testing.TB, name string, qtype uint16) []byte {
	t.Helper()
	buf := make([]byte, MaxQuestion)
	n, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return append(buf[:n], byte(qtype>>8), byte(qtype), 0, 1)
}

func TestLowerQuestion(t *testing.T) {
	q := packQuestion(t, "WeB.Demo.", dns.TypeA)
	var key [MaxQuestion]byte
	n, err := LowerQuestion(&key, q)
	if err != nil || n != len(q)-4 {
		t.Fatalf("LowerQuestion = %d, %v", n, err)
	}
	if want := packQuestion(t, "web.demo.", dns.TypeA); !bytes.Equal(key[:len(q)], want) {
		t.Errorf("key = %q, want %q", key[:len(q)], want)
	}
	if !EqualFold(q[:n], key[:n]) || EqualFold(q[:n], packQuestion(t, "web.demx.", 1)[:n]) {
		t.Error("EqualFold disagrees with LowerQuestion")
	}
	bad := map[string][]byte{
		"empty":       nil,
		"pointer":     {0xC0, 12, 0, 1, 0, 1},
		"no class":    {0, 0, 1},
		"trailing":    append(append([]byte(nil), q...), 0),
		"label short": {5, 'a', 'b'},
	}
	for name, b := range bad {
		if _, err := LowerQuestion(&key, b); err == nil {
			t.Errorf("%s: accepted %q", name, b)
		}
	}
}

func TestSkipAndOPT(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("web.demo.", dns.TypeA)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "web.demo.", Rrtype: dns.TypeA, Class: 1, Ttl: 5}, A: []byte{10, 0, 0, 1}}}
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	off := SkipName(b, HeaderLen) + 4
	end := SkipRR(b, off)
	if end != len(b) {
		t.Fatalf("SkipRR = %d, want %d", end, len(b))
	}
	b = AppendOPT(b, EDNSSize, 0x10|dns.RcodeServerFailure, true)
	b[11] = 1
	var got dns.Msg
	if err := got.Unpack(b); err != nil {
		t.Fatal(err)
	}
	opt := got.IsEdns0()
	if opt == nil || opt.UDPSize() != EDNSSize || !opt.Do() || opt.ExtendedRcode() != 0x10 {
		t.Errorf("OPT = %v", opt)
	}
}

// FuzzWire checks the walkers against miekg/dns: they never panic, and a
// question LowerQuestion accepts is one miekg reads to the same name.
func FuzzWire(f *testing.F) {
	f.Add([]byte{3, 'w', 'W', 'w', 0, 0, 1, 0, 1})
	f.Add([]byte{0xC0, 0})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = SkipRR(b, 0)
		if off := SkipName(b, 0); off > len(b) {
			t.Fatalf("SkipName past the end: %d > %d", off, len(b))
		}
		var key [MaxQuestion]byte
		n, err := LowerQuestion(&key, b)
		if err != nil {
			return
		}
		name, off, err := dns.UnpackDomainName(b, 0)
		if err != nil || off != n {
			t.Fatalf("accepted %q but miekg: %q %d %v", b, name, off, err)
		}
		lname, _, _ := dns.UnpackDomainName(key[:n], 0)
		if lname != dns.CanonicalName(name) {
			t.Fatalf("lowered %q, miekg %q", lname, dns.CanonicalName(name))
		}
	})
}
