package vip

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustNew(t testing.TB, cidrs ...string) *Allocator {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	a, err := New(ps)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAssignIsDeterministicAndOrderIndependent(t *testing.T) {
	a := mustNew(t, "240.240.0.0/16", "fd00:240::/48")
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d.example", i)
	}
	want, err := a.Assign(names)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		shuffled := append([]string(nil), names...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		// A fresh allocator stands for another replica or a restart.
		got, err := mustNew(t, "240.240.0.0/16", "fd00:240::/48").Assign(shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Fatalf("shuffle %d (-want +got):\n%s", i, diff)
		}
	}
	seen := map[netip.Addr]string{}
	for h, as := range want {
		if len(as) != 2 || !as[0].Is4() || !as[1].Is6() {
			t.Fatalf("%s: %v, want one v4 and one v6", h, as)
		}
		for _, ip := range as {
			if other, dup := seen[ip]; dup {
				t.Fatalf("%s and %s share %v", h, other, ip)
			}
			seen[ip] = h
		}
	}
}

func TestCollisions(t *testing.T) {
	tests := []struct {
		name    string
		cidr    string
		names   int
		wantErr bool
	}{
		{name: "tiny pool filled exactly", cidr: "10.0.0.0/29", names: 6},
		{name: "a /24 nearly full", cidr: "10.0.0.0/24", names: 250},
		{name: "more names than addresses", cidr: "10.0.0.0/30", names: 3, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := mustNew(t, tc.cidr)
			names := make([]string, tc.names)
			for i := range names {
				names[i] = fmt.Sprintf("n%d", i)
			}
			got, err := a.Assign(names)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			p := netip.MustParsePrefix(tc.cidr)
			seen := map[netip.Addr]bool{}
			for h, as := range got {
				ip := as[0]
				if !p.Contains(ip) || ip == p.Addr() || ip == lastAddr(p) {
					t.Errorf("%s got %v outside the usable range of %v", h, ip, p)
				}
				if seen[ip] {
					t.Errorf("%v assigned twice", ip)
				}
				seen[ip] = true
			}
			if !tc.wantErr && len(got) != tc.names {
				t.Errorf("assigned %d names, want %d", len(got), tc.names)
			}
		})
	}
}

func TestStableWhenOthersChange(t *testing.T) {
	a := mustNew(t, "240.240.0.0/16")
	base := []string{"api.example", "db.example", "cache.example"}
	before, _ := a.Assign(base)
	after, _ := a.Assign(append(base[:2:2], "zzz.example", "queue.example"))
	for _, h := range base[:2] {
		if before[h][0] != after[h][0] {
			t.Errorf("%s moved from %v to %v", h, before[h][0], after[h][0])
		}
	}
	// Spelling does not matter.
	mixed, _ := a.Assign([]string{"API.Example."})
	if mixed["API.Example."][0] != before["api.example"][0] {
		t.Errorf("API.Example. = %v, want %v", mixed["API.Example."][0], before["api.example"][0])
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr()
	for n := 0; n < (1<<(32-p.Bits()))-1; n++ {
		a = a.Next()
	}
	return a
}

func BenchmarkAssign1000(b *testing.B) {
	a := mustNew(b, "240.240.0.0/16", "fd00:240::/48")
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d.example", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Assign(names); err != nil {
			b.Fatal(err)
		}
	}
}
