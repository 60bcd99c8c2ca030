package iptables

import (
	"strings"
	"testing"
)

// FuzzParseSave: any input either fails to parse or yields a dump whose
// clean plan only names chains of ours in -X lines.
func FuzzParseSave(f *testing.F) {
	f.Add(existing)                                                                       // a realistic save with foreign and stale rules
	f.Add("*nat\n:OUTPUT ACCEPT [0:0]\n")                                                 // table without COMMIT
	f.Add("*nat\n-A X -m comment --comment \"meshdns \\\"q\\\"\" -j MESHDNS_A\nCOMMIT\n") // escaped quotes
	f.Add("*\n")                                                                          // empty table name
	f.Fuzz(func(t *testing.T, in string) {
		d, err := ParseSave(in)
		if err != nil {
			return
		}
		for _, line := range strings.Split(CleanInput(d), "\n") {
			if c, ok := strings.CutPrefix(line, "-X "); ok && !ours(c) {
				t.Fatalf("clean would delete foreign chain %q", c)
			}
		}
	})
}

// FuzzSplitArgs: splitting never panics, and re-quoting the arguments
// splits back to the same arguments.
func FuzzSplitArgs(f *testing.F) {
	f.Add(`-m comment --comment "meshdns capture DNS" -j MESHDNS_OUTPUT`) // typical rule
	f.Add(`--comment "a \"b\""`)                                          // escaped quote
	f.Add(`"unterminated`)                                                // error path
	f.Fuzz(func(t *testing.T, in string) {
		args, err := SplitArgs(in)
		if err != nil {
			return
		}
		var quoted []string
		for _, a := range args {
			quoted = append(quoted, `"`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a)+`"`)
		}
		again, err := SplitArgs(strings.Join(quoted, " "))
		if err != nil {
			t.Fatalf("re-split of %q: %v", quoted, err)
		}
		if strings.Join(again, "\x00") != strings.Join(args, "\x00") || len(again) != len(args) {
			t.Fatalf("round trip %q -> %q", args, again)
		}
	})
}

// FuzzParseResolvConf: never panics; every returned address is valid and
// has no zone (iptables cannot match zones).
func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 10.96.0.10\nsearch a.svc.cluster.local\noptions ndots:5\n") // pod file
	f.Add("nameserver fe80::1%eth0\n")                                            // zoned v6
	f.Add("nameserver\n")                                                         // error path
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseResolvConf(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, a := range got {
			if !a.IsValid() || a.Zone() != "" {
				t.Fatalf("bad address %v", a)
			}
		}
	})
}
