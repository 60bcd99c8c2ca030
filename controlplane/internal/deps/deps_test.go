package deps

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDefaultsAndPassThrough(t *testing.T) {
	if Now(nil) == nil || Logger(nil) == nil || Registerer(nil) == nil {
		t.Fatal("a nil dependency was not filled in")
	}
	if Registerer(nil) == Registerer(nil) {
		t.Error("default registries are shared; components would collide")
	}
	at := time.Unix(42, 0)
	if got := Now(func() time.Time { return at })(); !got.Equal(at) {
		t.Errorf("Now replaced the given clock: got %v", got)
	}
	l := slog.Default()
	if Logger(l) != l {
		t.Error("Logger replaced the given logger")
	}
	r := prometheus.NewRegistry()
	if Registerer(r) != r {
		t.Error("Registerer replaced the given registry")
	}
}
