package loadagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEventLine(t *testing.T) {
	for _, e := range []Event{
		{Agent: 7, Addr: "127.0.0.1:15010", Version: "00ab", Kind: "delta", Empty: true, At: time.Unix(0, 1700000000123456789), Bytes: 42},
		{Agent: 0, Addr: "[::1]:1", Kind: "full", Watched: "10.0.0.1", At: time.Unix(5, 0), Bytes: 592055},
	} {
		got, err := ParseEvent(FormatEvent(e))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	if _, err := ParseEvent("EV 1 full"); err == nil {
		t.Error("a short line parsed")
	}
}

func TestDeltaEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{name: "base only", b: []byte{0x0a, 0x02, 'v', '1'}, want: true},
		{name: "nothing", b: nil, want: true},
		{name: "removed name", b: []byte{0x0a, 0x02, 'v', '1', 0x1a, 0x01, 'x'}, want: false},
		{name: "truncated", b: []byte{0x0a, 0x05, 'v'}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deltaEmpty(tc.b); got != tc.want {
				t.Errorf("deltaEmpty = %v, want %v", got, tc.want)
			}
		})
	}
}
