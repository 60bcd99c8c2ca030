package proxy

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// TestReplyFlagsByOpcode: RA, RD, CD and AD mean something for QUERY
// only, so a NOTIMP to any other opcode has them clear; a QUERY the proxy
// answers itself (FORMERR, BADVERS) keeps RA and echoes RD and CD.
func TestReplyFlagsByOpcode(t *testing.T) {
	h, err := NewHandler(testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}))
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(demoTable(t))
	type flags struct {
		Rcode, Opcode      int
		RA, RD, CD, AD, QR bool
	}
	tests := []struct {
		name string
		// edit changes a query for web.demo.svc.cluster.local. A with RD,
		// CD and AD set.
		edit func(m *dns.Msg)
		// raw, when set, changes the packed query.
		raw  func(pkt []byte) []byte
		want flags
	}{
		{
			name: "notify",
			edit: func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify; m.Question[0].Qtype = dns.TypeSOA },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: dns.OpcodeNotify, QR: true},
		},
		{
			name: "update",
			edit: func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate; m.Question[0].Qtype = dns.TypeSOA },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: dns.OpcodeUpdate, QR: true},
		},
		{
			name: "status",
			edit: func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: dns.OpcodeStatus, QR: true},
		},
		{
			name: "unknown opcode",
			raw:  func(pkt []byte) []byte { return withOpcode(pkt, 15) },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: 15, QR: true},
		},
		{
			name: "unknown opcode, header only",
			raw:  func(pkt []byte) []byte { return withOpcode(pkt[:dnswire.HeaderLen], 15) },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: 15, QR: true},
		},
		{
			name: "unknown opcode, slow path",
			edit: func(m *dns.Msg) { m.Answer = mustRRs(t, "web.demo.svc.cluster.local. 5 IN A 10.9.9.9") },
			raw:  func(pkt []byte) []byte { return withOpcode(pkt, 15) },
			want: flags{Rcode: dns.RcodeNotImplemented, Opcode: 15, QR: true},
		},
		{
			name: "query formerr keeps ra, rd, cd",
			edit: func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) },
			want: flags{Rcode: dns.RcodeFormatError, QR: true, RA: true, RD: true, CD: true},
		},
		{
			name: "query badvers keeps ra, rd, cd",
			edit: func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) },
			want: flags{Rcode: dns.RcodeBadVers, QR: true, RA: true, RD: true, CD: true},
		},
		{
			name: "query answered from the table",
			want: flags{Rcode: dns.RcodeSuccess, QR: true, RA: true, RD: true, CD: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
			m.Id, m.RecursionDesired, m.CheckingDisabled, m.AuthenticatedData = 0x1234, true, true, true
			if tc.edit != nil {
				tc.edit(m)
			}
			pkt, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != nil {
				pkt = tc.raw(pkt)
			}
			out := h.Serve(context.Background(), nil, pkt, UDP)
			if len(out) < dnswire.HeaderLen {
				t.Fatalf("reply %x, want a header at least", out)
			}
			r := new(dns.Msg)
			if err := r.Unpack(out); err != nil {
				// A header-only reply to an unknown opcode unpacks; others
				// must too.
				t.Fatalf("unpack reply %x: %v", out, err)
			}
			if r.Id != m.Id {
				t.Errorf("id %#x, want %#x", r.Id, m.Id)
			}
			got := flags{Rcode: r.Rcode, Opcode: r.Opcode, QR: r.Response, RA: r.RecursionAvailable,
				RD: r.RecursionDesired, CD: r.CheckingDisabled, AD: r.AuthenticatedData}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reply flags (-want +got):\n%s", diff)
			}
		})
	}
}
