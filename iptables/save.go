package iptables

import (
	"bufio"
	"fmt"
	"strings"
)

// Dump is the parsed output of iptables-save: per table, the chains in the
// order printed and each chain's rules as specs (the text after "-A CHAIN ").
type Dump map[string]*TableDump

// TableDump is one table of a Dump.
type TableDump struct {
	// Chains in the order iptables-save declares them.
	Chains []string
	// Rules per chain, each the spec after "-A CHAIN ".
	Rules map[string][]string
}

// maxSaveLine bounds one line of iptables-save output; a rule with a long
// comment is a few hundred bytes.
const maxSaveLine = 1 << 20

// ParseSave parses iptables-save output. Comment lines (the "# Generated
// by" header, the nft backend's warnings) are skipped; anything else that is
// not a table, chain, rule or COMMIT line is an error, because acting on a
// half-understood ruleset could delete the wrong rule.
func ParseSave(text string) (Dump, error) {
	d := Dump{}
	var cur *TableDump
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), maxSaveLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			name := line[1:]
			if name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("iptables-save line %d: bad table %q", n, line)
			}
			cur = d[name]
			if cur == nil {
				cur = &TableDump{Rules: map[string][]string{}}
				d[name] = cur
			}
		case line == "COMMIT":
			if cur == nil {
				return nil, fmt.Errorf("iptables-save line %d: COMMIT outside a table", n)
			}
			cur = nil
		case strings.HasPrefix(line, ":"):
			if cur == nil {
				return nil, fmt.Errorf("iptables-save line %d: chain outside a table", n)
			}
			name, _, _ := strings.Cut(line[1:], " ")
			if name == "" {
				return nil, fmt.Errorf("iptables-save line %d: chain without a name", n)
			}
			if _, ok := cur.Rules[name]; !ok {
				cur.Chains = append(cur.Chains, name)
				cur.Rules[name] = nil
			}
		case strings.HasPrefix(line, "-A "):
			if cur == nil {
				return nil, fmt.Errorf("iptables-save line %d: rule outside a table", n)
			}
			chain, spec, _ := strings.Cut(strings.TrimSpace(line[3:]), " ")
			if chain == "" {
				return nil, fmt.Errorf("iptables-save line %d: rule without a chain", n)
			}
			if _, ok := cur.Rules[chain]; !ok {
				cur.Chains = append(cur.Chains, chain)
			}
			cur.Rules[chain] = append(cur.Rules[chain], strings.TrimSpace(spec))
		default:
			return nil, fmt.Errorf("iptables-save line %d: cannot parse %q", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read iptables-save output: %w", err)
	}
	return d, nil
}

// ours reports whether chain is one of meshdns's chains.
func ours(chain string) bool { return strings.HasPrefix(chain, ChainPrefix) }

// oursIn returns the chains of ours in table t.
func (d Dump) oursIn(t string) []string {
	td := d[t]
	if td == nil {
		return nil
	}
	var out []string
	for _, c := range td.Chains {
		if ours(c) {
			out = append(out, c)
		}
	}
	return out
}

// ruleRef is a rule found in a dump, named by its chain and spec.
type ruleRef struct {
	Chain string
	Spec  string
}

// jumpsIn returns the rules of chains that are not ours but belong to us:
// they jump to one of our chains or carry our owner comment. They are
// removed on apply (and the wanted ones inserted again) and on clean.
func (d Dump) jumpsIn(t string) []ruleRef {
	td := d[t]
	if td == nil {
		return nil
	}
	var out []ruleRef
	for _, c := range td.Chains {
		if ours(c) {
			continue
		}
		for _, spec := range td.Rules[c] {
			if ownedRule(spec) {
				out = append(out, ruleRef{Chain: c, Spec: spec})
			}
		}
	}
	return out
}

// ownedRule reports whether a rule spec jumps to a chain of ours or has our
// owner comment.
func ownedRule(spec string) bool {
	args, err := SplitArgs(spec)
	if err != nil {
		return false
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "--jump", "-g", "--goto":
			if ours(args[i+1]) {
				return true
			}
		case "--comment":
			if strings.HasPrefix(args[i+1], CommentPrefix) {
				return true
			}
		}
	}
	return false
}

// SplitArgs splits a rule spec into arguments the way iptables-restore
// does: on blanks, with double-quoted strings kept whole and backslash
// escaping the next character inside quotes.
func SplitArgs(spec string) ([]string, error) {
	var (
		out     []string
		cur     strings.Builder
		inArg   bool
		quoted  bool
		escaped bool
	)
	for _, r := range spec {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted = !quoted
			inArg = true
		case !quoted && (r == ' ' || r == '\t'):
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quoted || escaped {
		return nil, fmt.Errorf("unterminated quote in %q", spec)
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out, nil
}
