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

// FuzzSettingsAttach checks the control plane's per-agent settings against
// the generated code: a policy marshalled alone, wrapped as a policy field
// and followed by the rest of the settings marshalled without it, is what
// proto marshals for the whole; attached after a shared full table or
// delta (AppendSettingsHead, and for a delta a base version in parts:
// AppendDeltaBase), re-headed with a version in parts and a nonce, proto
// decodes the response it was made to be, and the agent's reader reads the
// same settings.
func FuzzSettingsAttach(f *testing.F) {
	// A delta to an agent holding settings; a full table; empty strings;
	// a policy of more than 127 bytes (multi-byte lengths); strings not
	// UTF-8 (refused by proto's marshal: the parts never make them).
	f.Add("v1", "s1", "v0", "s0", "*.example.com", "zone-a", false, uint64(7))
	f.Add("v2", "s2", "", "", "a.x", "", true, uint64(0))
	f.Add("", "", "", "", "", "", false, uint64(1<<64-1))
	f.Add("v", "s", "b", "h", string(make([]byte, 200)), "z", true, uint64(300))
	f.Add("v", "s", "b", "\xff", "a.x", "z", false, uint64(1))
	f.Add("v", "s", "b", "h", "\xff", "z", true, uint64(1))
	f.Fuzz(func(t *testing.T, version, settings, base, held, pattern, zone string, full bool, nonce uint64) {
		pbPolicy := &meshdnsv1.DNSPolicy{Rules: []*meshdnsv1.PolicyRule{{Pattern: pattern, Action: meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW}},
			OutsideDefault: meshdnsv1.PolicyAction_POLICY_ACTION_DENY, Source: "ns/p"}
		pbSettings := &meshdnsv1.AgentSettings{Policy: pbPolicy, PodZone: zone, Requires: []string{"policy"}}
		det := proto.MarshalOptions{Deterministic: true}
		want, err := det.Marshal(pbSettings)
		if err != nil {
			return // a string not UTF-8: the parts never make one
		}
		policy, err := det.Marshal(pbPolicy)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := det.Marshal(&meshdnsv1.AgentSettings{PodZone: zone, Requires: []string{"policy"}})
		if err != nil {
			t.Fatal(err)
		}
		st := append(namewire.AppendSettingsPolicy(nil, policy), rest...)
		if diff := cmp.Diff(want, st); diff != "" {
			t.Fatalf("policy field and rest, against proto's whole (-want +got):\n%s", diff)
		}
		b, wantResp := attachSettings(t, version, settings, base, held, st, full, nonce, pbSettings)
		// A full table carries neither base version; a delta carries
		// base, and held when the agent holds settings.
		valid := utf8.ValidString(version) && utf8.ValidString(settings) &&
			(full || utf8.ValidString(base) && utf8.ValidString(held))
		checkResponse(t, b, valid, wantResp)
		if !valid {
			return
		}
		r, err := readResponse(b)
		if err != nil {
			t.Fatal(err)
		}
		var got *namewire.AgentSettings
		if full {
			if got, err = namewire.TableSettings(r.Full); err != nil {
				t.Fatalf("TableSettings: %v", err)
			}
		} else {
			got = r.Delta.Settings
		}
		if diff := cmp.Diff(fromSettings(pbSettings), got, equate); diff != "" {
			t.Fatalf("settings ReadResponse read (-want +got):\n%s", diff)
		}
	})
}

// attachSettings makes what the control plane sends an agent that holds
// the version base+"+"+held (none when held is ""), at version+"+"+settings
// with the settings st: a shared response of one name, split, its table or
// delta followed by the base (a delta only) and the settings field, a head
// and a nonce; and the message proto should decode from it.
func attachSettings(t *testing.T, version, settings, base, held string, st []byte, full bool, nonce uint64, pb *meshdnsv1.AgentSettings) ([]byte, *meshdnsv1.StreamNameTableResponse) {
	t.Helper()
	info := namewire.NameInfo{IPs: []string{"10.0.0.1"}}
	var shared []byte
	if full {
		shared = namewire.AppendFullResponse(nil, version, namewire.AppendEntry(nil, "a.x", info.Append(nil)))
	} else {
		d := namewire.AppendDeltaBase(nil, base)
		shared = namewire.AppendDeltaResponse(nil, version, namewire.AppendDeltaUpserted(d, "a.x", info.Append(nil)))
	}
	_, body, err := namewire.SplitResponse(shared)
	if err != nil {
		t.Fatal(err)
	}
	var inner []byte
	wantBase := base
	if !full && held != "" {
		inner = namewire.AppendDeltaBase(inner, base, "+", held)
		wantBase = base + "+" + held
	}
	inner = append(namewire.AppendSettingsHead(inner, full, len(st)), st...)
	b := namewire.AppendResponseHead(nil, full, len(body)+len(inner), version, "+", settings)
	b = namewire.AppendNonce(append(append(b, body...), inner...), nonce)

	want := &meshdnsv1.StreamNameTableResponse{VersionInfo: version + "+" + settings, Nonce: strconv.FormatUint(nonce, 10)}
	names := map[string]*meshdnsv1.NameInfo{"a.x": {Ips: []string{"10.0.0.1"}}}
	if full {
		want.Update = &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{Table: names, Settings: pb}}
	} else {
		want.Update = &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: wantBase, Upserted: names, Settings: pb}}
	}
	return b, want
}
