package controlplane_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/loadagent"
)

// The load agents' children report each response on a line of their
// output (loadagent.FormatEvent); the scale benchmark reads them back.

// parseEvent reads a line written by loadagent.FormatEvent.
func parseEvent(line string) (loadagent.Event, error) {
	f := strings.Fields(line)
	if len(f) != 9 || f[0] != "EV" {
		return loadagent.Event{}, fmt.Errorf("not an event line: %q", line)
	}
	var e loadagent.Event
	var err error
	errs := func(e2 error) {
		if err == nil {
			err = e2
		}
	}
	var x error
	e.Agent, x = strconv.Atoi(f[1])
	errs(x)
	e.Kind = f[2]
	e.Empty, x = strconv.ParseBool(f[3])
	errs(x)
	if f[4] != "-" {
		e.Watched = f[4]
	}
	ns, x := strconv.ParseInt(f[5], 10, 64)
	errs(x)
	e.At = time.Unix(0, ns)
	e.Bytes, x = strconv.Atoi(f[6])
	errs(x)
	if f[7] != "-" {
		e.Version = f[7]
	}
	e.Addr = f[8]
	if err != nil {
		return loadagent.Event{}, fmt.Errorf("event line %q: %w", line, err)
	}
	return e, nil
}

func TestEventLine(t *testing.T) {
	for _, e := range []loadagent.Event{
		{Agent: 7, Addr: "127.0.0.1:15010", Version: "00ab", Kind: "delta", Empty: true, At: time.Unix(0, 1700000000123456789), Bytes: 42},
		{Agent: 0, Addr: "[::1]:1", Kind: "full", Watched: "10.0.0.1", At: time.Unix(5, 0), Bytes: 592055},
	} {
		got, err := parseEvent(loadagent.FormatEvent(e))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	if _, err := parseEvent("EV 1 full"); err == nil {
		t.Error("a short line parsed")
	}
}
