package loadagent

import "testing"

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
