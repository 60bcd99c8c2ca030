package namewire_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// FuzzResponseEncode checks the control plane's encoder of responses
// against the generated decoder: a full table and a delta made of the
// fuzzed strings decode to the messages they were made from, and the
// agent's reader reads them back; split and written again with a head of
// a version in two parts and a nonce (as the control plane sends a shared
// response to one agent), they decode to the same with that version and
// nonce.
func FuzzResponseEncode(f *testing.F) {
	// A plain name, empty strings (written, not skipped), a long name
	// (multi-byte lengths), a name not UTF-8 (refused by both).
	f.Add("v1", "base", "a.x", "zone", "b.x", uint32(80), false, uint64(7))
	f.Add("", "", "", "", "", uint32(0), true, uint64(0))
	f.Add(string(make([]byte, 300)), "é", "team-a.x", "zone.with.a.long.name", "gone.x", uint32(65535), false, uint64(1<<64-1))
	f.Add("v", "b", "\xff", "z", "r", uint32(1), true, uint64(300))
	f.Fuzz(func(t *testing.T, version, base, host, zone, removed string, port uint32, emptyZones bool, nonce uint64) {
		pbInfo := &meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}, Ports: []*meshdnsv1.Port{{Name: "http", Port: port, Protocol: "TCP"}}}
		info, err := proto.MarshalOptions{Deterministic: true}.Marshal(pbInfo)
		if err != nil {
			t.Fatal(err)
		}
		zones := []string{zone}
		if emptyZones {
			zones = nil
		}
		var table []byte
		table = namewire.AppendEntry(table, host, info)
		for _, z := range zones {
			table = namewire.AppendZone(table, z)
		}
		var d []byte
		d = namewire.AppendDeltaBase(d, base)
		d = namewire.AppendDeltaUpserted(d, host, info)
		d = namewire.AppendDeltaRemoved(d, removed)
		d = namewire.AppendDeltaZones(d, zones)
		valid := utf8.ValidString(version) && utf8.ValidString(host) && (emptyZones || utf8.ValidString(zone))

		wantFull := &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Update: &meshdnsv1.StreamNameTableResponse_Full{
			Full: &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{host: pbInfo}, AuthoritativeZones: zones}}}
		checkResponse(t, namewire.AppendFullResponse(nil, version, table), valid, wantFull)
		resend(t, namewire.AppendFullResponse(nil, version, table), base, nonce, valid, wantFull)
		wantDelta := &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Update: &meshdnsv1.StreamNameTableResponse_Delta{
			Delta: &meshdnsv1.NameTableDelta{BaseVersion: base, Upserted: map[string]*meshdnsv1.NameInfo{host: pbInfo},
				Removed: []string{removed}, AuthoritativeZones: &meshdnsv1.ZoneSet{Zones: zones}}}}
		valid = valid && utf8.ValidString(base) && utf8.ValidString(removed)
		checkResponse(t, namewire.AppendDeltaResponse(nil, version, d), valid, wantDelta)
		resend(t, namewire.AppendDeltaResponse(nil, version, d), "", nonce, valid, wantDelta)
	})
}

// checkResponse decodes b with the generated code, which must accept it
// when valid (every string UTF-8) and then give want, and with
// ReadResponse, which must agree.
func checkResponse(t *testing.T, b []byte, valid bool, want *meshdnsv1.StreamNameTableResponse) {
	t.Helper()
	got := new(meshdnsv1.StreamNameTableResponse)
	err := proto.Unmarshal(b, got)
	if !valid {
		if err == nil {
			t.Fatalf("proto accepted a response with a string not UTF-8: %v", got)
		}
		return
	}
	if err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("decoded response (-want +got):\n%s", diff)
	}
	r, err := readResponse(b)
	if err != nil {
		t.Fatalf("ReadResponse of what proto reads: %v", err)
	}
	if r.Version != want.GetVersionInfo() || r.Nonce != want.GetNonce() || r.IsFull != (want.GetFull() != nil) || (r.Delta != nil) != (want.GetDelta() != nil) {
		t.Fatalf("ReadResponse = %+v, want %v", r, want)
	}
}

// resend splits resp and writes it again with the version want's joined
// with "+" and suffix (when not empty) and the nonce, and checks the
// result decodes to want with them.
func resend(t *testing.T, resp []byte, suffix string, nonce uint64, valid bool, want *meshdnsv1.StreamNameTableResponse) {
	t.Helper()
	full, body, err := namewire.SplitResponse(resp)
	if err != nil || full != (want.GetFull() != nil) {
		t.Fatalf("SplitResponse = %v, %v; want full %v", full, err, want.GetFull() != nil)
	}
	parts := []string{want.GetVersionInfo()}
	if suffix != "" {
		parts = append(parts, "+", suffix)
	}
	version := strings.Join(parts, "")
	head := namewire.AppendResponseHead(nil, full, len(body), parts...)
	if n := namewire.ResponseHeadSize(len(version), len(body)); n != len(head) {
		t.Fatalf("ResponseHeadSize = %d, head has %d bytes", n, len(head))
	}
	b := namewire.AppendNonce(append(head, body...), nonce)
	want = proto.CloneOf(want)
	want.VersionInfo, want.Nonce = version, strconv.FormatUint(nonce, 10)
	checkResponse(t, b, valid && utf8.ValidString(suffix), want)
}
