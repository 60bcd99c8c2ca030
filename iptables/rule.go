package iptables

import (
	"strings"
)

// ChainPrefix starts the name of every chain meshdns owns. Clean and Apply
// treat any chain with this prefix as ours, so chains left by an older
// version with other names are still removed.
const ChainPrefix = "MESHDNS_"

// CommentPrefix starts the owner comment of every rule meshdns writes.
const CommentPrefix = "meshdns "

// Rule is one rule of ours. It renders in the canonical order iptables-save
// prints (addresses and protocol, matches, our comment, target), which both
// backends keep byte for byte, so a rule read back from iptables-save can be
// compared with the rendered one as a string.
type Rule struct {
	// Table is "nat" or "raw".
	Table string
	// Chain the rule is appended to.
	Chain string
	// Match holds everything before the comment: -d, -p and -m options.
	Match []string
	// Comment is the owner comment without CommentPrefix. It must not hold
	// double quotes.
	Comment string
	// Target is the -j target and its options.
	Target []string
}

// Spec renders the rule without the leading "-A CHAIN": the form used for
// -A, -I and -D lines and the form ParseSave returns.
func (r Rule) Spec() string {
	var b strings.Builder
	for _, m := range r.Match {
		b.WriteString(m)
		b.WriteByte(' ')
	}
	b.WriteString(`-m comment --comment "`)
	b.WriteString(CommentPrefix)
	b.WriteString(r.Comment)
	b.WriteString(`" -j `)
	b.WriteString(strings.Join(r.Target, " "))
	return b.String()
}

// Chain is one chain of ours with its rules, in order.
type Chain struct {
	Table string
	Name  string
	Rules []Rule
}

// Ruleset is everything one family needs: our chains and the jumps into
// them from the built-in chains.
type Ruleset struct {
	Family Family
	// Chains are ours (names start with ChainPrefix).
	Chains []Chain
	// Jumps are inserted at the top of built-in chains, exactly once each.
	Jumps []Rule
}

// tables returns the tables the ruleset touches, in the order they are
// written: raw before nat, so the conntrack zones are in place before the
// first packet is redirected.
func (rs Ruleset) tables() []string {
	return []string{"raw", "nat"}
}

func (rs Ruleset) chainsIn(table string) []Chain {
	var out []Chain
	for _, c := range rs.Chains {
		if c.Table == table {
			out = append(out, c)
		}
	}
	return out
}

func (rs Ruleset) jumpsIn(table string) []Rule {
	var out []Rule
	for _, j := range rs.Jumps {
		if j.Table == table {
			out = append(out, j)
		}
	}
	return out
}
