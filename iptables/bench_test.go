package iptables

import "testing"

// BenchmarkApplyInput measures rendering a dual-stack transaction against
// a live ruleset with duplicates: the work apply and every drift repair
// do besides running the binaries.
func BenchmarkApplyInput(b *testing.B) {
	cfg := goldenConfigs[1].cfg
	cur, err := ParseSave(existing)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = ApplyInput(Build(cfg, IPv4), cur)
	}
}

// BenchmarkDiff measures one drift check after the save output is read.
func BenchmarkDiff(b *testing.B) {
	rs := Build(goldenConfigs[1].cfg, IPv4)
	cur, err := ParseSave(existing)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = diffRules(rs, cur)
	}
}
