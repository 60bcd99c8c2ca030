package iptables

import (
	"slices"
	"sort"
	"strings"
)

// ApplyInput renders the iptables-restore --noflush input that makes the
// live ruleset cur hold exactly rs. In one transaction per table it
// declares our chains (which creates them, or flushes them when they
// exist), deletes every jump of ours that cur shows (so duplicates left by
// an interrupted run or a foreign tool disappear too), inserts each wanted
// jump at the top of its built-in chain, appends our rules and deletes
// chains of ours that rs no longer has. Rules and chains of others are
// never named, so they are left alone.
//
// cur comes from an iptables-save run just before; a rule added between
// that read and the restore is not seen, which at worst leaves one extra
// jump that the next apply or reconcile removes.
func ApplyInput(rs Ruleset, cur Dump) string {
	var b strings.Builder
	for _, t := range rs.tables() {
		chains := rs.chainsIn(t)
		want := map[string]bool{}
		b.WriteString("*" + t + "\n")
		for _, c := range chains {
			want[c.Name] = true
			b.WriteString(":" + c.Name + " - [0:0]\n")
		}
		var stale []string
		for _, c := range cur.oursIn(t) {
			if !want[c] {
				stale = append(stale, c)
				b.WriteString(":" + c + " - [0:0]\n")
			}
		}
		for _, j := range cur.jumpsIn(t) {
			b.WriteString("-D " + j.Chain + " " + j.Spec + "\n")
		}
		for _, c := range stale {
			b.WriteString("-X " + c + "\n")
		}
		// -I at position 1 in reverse order keeps several jumps into one
		// built-in chain in the order listed.
		jumps := rs.jumpsIn(t)
		for i := len(jumps) - 1; i >= 0; i-- {
			b.WriteString("-I " + jumps[i].Chain + " 1 " + jumps[i].Spec() + "\n")
		}
		for _, c := range chains {
			for _, r := range c.Rules {
				b.WriteString("-A " + c.Name + " " + r.Spec() + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	// Tables we no longer use but where an older version left something.
	for _, t := range cur.tableNames() {
		if !slices.Contains(rs.tables(), t) {
			b.WriteString(cleanTable(cur, t))
		}
	}
	return b.String()
}

// CleanInput renders the iptables-restore --noflush input that removes
// every chain of ours and every rule that jumps to one, from every table
// in cur, and nothing else. It is empty when cur holds nothing of ours.
func CleanInput(cur Dump) string {
	var b strings.Builder
	for _, t := range cur.tableNames() {
		b.WriteString(cleanTable(cur, t))
	}
	return b.String()
}

func cleanTable(cur Dump, t string) string {
	chains, jumps := cur.oursIn(t), cur.jumpsIn(t)
	if len(chains) == 0 && len(jumps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*" + t + "\n")
	// Declaring a chain under --noflush flushes it, so rules of one of our
	// chains that jump to another no longer block the -X below.
	for _, c := range chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, j := range jumps {
		b.WriteString("-D " + j.Chain + " " + j.Spec + "\n")
	}
	for _, c := range chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// tableNames returns the tables of d in a fixed order: raw and nat first
// (the order apply writes them), then the rest sorted.
func (d Dump) tableNames() []string {
	var out []string
	for _, t := range []string{"raw", "nat"} {
		if d[t] != nil {
			out = append(out, t)
		}
	}
	var rest []string
	for t := range d {
		if t != "raw" && t != "nat" {
			rest = append(rest, t)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}
