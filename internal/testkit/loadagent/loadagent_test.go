package loadagent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// TestCodec reads responses marshalled by the generated code as an agent's
// stream hands them over, and checks the events they make.
func TestCodec(t *testing.T) {
	delta := func(d *meshdnsv1.NameTableDelta) *meshdnsv1.StreamNameTableResponse {
		return &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2", Nonce: "n2", Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: d}}
	}
	big := make(map[string]*meshdnsv1.NameInfo)
	for _, h := range []string{"a.x", "b.x", "c.x"} {
		big[h] = &meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}, AltHosts: []string{string(make([]byte, 40<<10))}}
	}
	for _, tc := range []struct {
		name string
		resp *meshdnsv1.StreamNameTableResponse
		want Event
	}{
		{
			name: "full table, larger than the read buffer",
			resp: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v1", Nonce: "n1", Update: &meshdnsv1.StreamNameTableResponse_Full{
				Full: &meshdnsv1.NameTable{Table: big, AuthoritativeZones: []string{"x"}}}},
			want: Event{Version: "v1", Kind: "full"},
		},
		{name: "base only", resp: delta(&meshdnsv1.NameTableDelta{BaseVersion: "v1"}), want: Event{Version: "v2", Kind: "delta", Empty: true}},
		{name: "removed name", resp: delta(&meshdnsv1.NameTableDelta{BaseVersion: "v1", Removed: []string{"x"}}), want: Event{Version: "v2", Kind: "delta"}},
		{name: "zones emptied", resp: delta(&meshdnsv1.NameTableDelta{AuthoritativeZones: &meshdnsv1.ZoneSet{}}), want: Event{Version: "v2", Kind: "delta"}},
		{
			name: "watched name upserted",
			resp: delta(&meshdnsv1.NameTableDelta{Upserted: map[string]*meshdnsv1.NameInfo{
				"w.x": {Ips: []string{"10.0.0.7", "10.0.0.8"}}, "o.x": {Ips: []string{"10.0.0.9"}}}}),
			want: Event{Version: "v2", Kind: "delta", Watched: "10.0.0.7"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			r, err := readResponse(b)
			if err != nil {
				t.Fatalf("readResponse: %v", err)
			}
			if r.nonce != tc.resp.GetNonce() {
				t.Errorf("nonce = %q, want %q", r.nonce, tc.resp.GetNonce())
			}
			got, err := event(Config{Watch: "w.x"}, "", &r, tc.want.At)
			if err != nil {
				t.Fatalf("event: %v", err)
			}
			tc.want.Bytes = len(b)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCodecTruncated: a response cut short is an error, not an event.
func TestCodecTruncated(t *testing.T) {
	b, err := proto.Marshal(&meshdnsv1.StreamNameTableResponse{VersionInfo: "v1", Update: &meshdnsv1.StreamNameTableResponse_Full{
		Full: &meshdnsv1.NameTable{AuthoritativeZones: []string{"cluster.local"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := readResponse(b[:len(b)-3]); err == nil {
		t.Errorf("readResponse of a truncated response = %+v, want an error", r)
	}
}
