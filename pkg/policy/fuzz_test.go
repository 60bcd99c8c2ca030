package policy

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzPattern: a pattern New accepts is one miekg accepts, and it matches
// exactly the names it says: an exact pattern itself in any case, with or
// without the dot; a wildcard the names strictly below its domain.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{
		"api.stripe.com",      // exact
		"*.s3.amazonaws.com.", // wildcard, trailing dot
		"A.B",                 // upper case
		"*",                   // bare wildcard: rejected
		"a.*.b",               // inner wildcard: rejected
		`a\.b.c`,              // escape: rejected
		"_srv._tcp.x",         // service labels
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		p, err := New(Config{Rules: []Rule{{Pattern: pattern, Action: Deny}}})
		if err != nil {
			return
		}
		name, wild, err := ParsePattern(pattern)
		if err != nil {
			t.Fatalf("New accepted %q, ParsePattern: %v", pattern, err)
		}
		if _, ok := dns.IsDomainName(name); !ok {
			t.Fatalf("accepted %q, which miekg refuses", pattern)
		}
		check := func(q string, want bool) {
			t.Helper()
			if got := p.Decide(q, false).Rule == 0; got != want {
				t.Fatalf("pattern %q: Decide(%q) matched %v, want %v", pattern, q, got, want)
			}
		}
		if wild {
			check(name, false)
			check("x."+name, true)
			check("X.Y."+strings.ToUpper(name)+".", true)
		} else {
			check(name, true)
			check(strings.ToUpper(name)+".", true)
			check("x."+name, false)
		}
	})
}

// FuzzDecide: any name is judged without a panic, the same as a string and
// as bytes.
func FuzzDecide(f *testing.F) {
	p, err := New(rules1000())
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range append(benchNames, "", ".", `\.`, `a\\.bucket1.storage.example.net`, "..", strings.Repeat("a.", 600)) {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, q string, fromTable bool) {
		d := p.Decide(q, fromTable)
		if db := p.DecideBytes([]byte(q), fromTable); db != d {
			t.Fatalf("%q: bytes %+v, string %+v", q, db, d)
		}
		p.DecideSearch(q, fromTable, podSearch)
	})
}
