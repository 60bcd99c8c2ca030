package nodezone

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/metawatch"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func node(name, zone string) *metav1.PartialObjectMetadata {
	n := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1",
		Labels: map[string]string{"kubernetes.io/hostname": name}, Annotations: map[string]string{"big": "x"}}}
	if zone != "" {
		n.Labels[Label] = zone
	}
	return n
}

// fake lists nodes once and then delivers the events a test sends.
func fake(w *watch.FakeWatcher, listErr error, nodes ...*metav1.PartialObjectMetadata) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			if listErr != nil {
				return nil, listErr
			}
			l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			for _, n := range nodes {
				l.Items = append(l.Items, *n)
			}
			return l, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}
}

func zoneOf(z *Zones, n string) string {
	var s meshdnsv1.AgentSettings
	z.Fill(auth.Identity{Node: n}, &s)
	return s.PodZone
}

func TestZones(t *testing.T) {
	w := watch.NewFake()
	z, err := New(Config{Nodes: fake(w, nil, node("n1", "zone-a"), node("n2", ""))})
	if err != nil {
		t.Fatal(err)
	}
	changed := z.Changed()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- z.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-changed // the list's n1
	if got := []string{zoneOf(z, "n1"), zoneOf(z, "n2"), zoneOf(z, ""), zoneOf(z, "nope")}; !cmp.Equal(got, []string{"zone-a", "", "", ""}) {
		t.Errorf("zones %q, want [zone-a   ]", got)
	}

	changed = z.Changed()
	w.Modify(node("n1", "zone-b"))
	<-changed
	if got := zoneOf(z, "n1"); got != "zone-b" {
		t.Errorf("after relabelling: zone %q, want zone-b", got)
	}
}

// TestSet: a change is announced only when a node's zone changed.
func TestSet(t *testing.T) {
	z, err := New(Config{Nodes: fake(watch.NewFake(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		obj     any
		deleted bool
		n, want string
		notify  bool
	}{
		{name: "new node", obj: node("n1", "zone-a"), n: "n1", want: "zone-a", notify: true},
		{name: "unrelated update", obj: node("n1", "zone-a"), n: "n1", want: "zone-a"},
		{name: "relabelled", obj: node("n1", "zone-b"), n: "n1", want: "zone-b", notify: true},
		{name: "node without a zone", obj: node("n2", ""), n: "n2", want: ""},
		{name: "label removed", obj: node("n1", ""), n: "n1", want: "", notify: true},
		{name: "labelled again", obj: node("n1", "zone-c"), n: "n1", want: "zone-c", notify: true},
		{name: "deleted, final state unknown", obj: cache.DeletedFinalStateUnknown{Key: "n1", Obj: node("n1", "zone-c")}, n: "n1", want: "", notify: true},
		{name: "deleted again", obj: node("n1", "zone-c"), deleted: true, n: "n1", want: ""},
		{name: "not a node", obj: "junk", n: "n1", want: ""},
	}
	strip, h := metawatch.Strip(metawatch.Label(Label)), metawatch.Handler(z.set)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			ch := z.Changed()
			stripped, _ := strip(st.obj)
			if st.deleted {
				h.OnDelete(stripped)
			} else {
				h.OnUpdate(nil, stripped)
			}
			notified := false
			select {
			case <-ch:
				notified = true
			default:
			}
			if notified != st.notify || zoneOf(z, st.n) != st.want {
				t.Errorf("zone of %s %q, notified %v; want %q, %v", st.n, zoneOf(z, st.n), notified, st.want, st.notify)
			}
		})
	}
	if got, _ := strip(node("n9", "z")); !cmp.Equal(got.(*metav1.PartialObjectMetadata).Labels, map[string]string{Label: "z"}) ||
		got.(*metav1.PartialObjectMetadata).Annotations != nil {
		t.Errorf("strip kept %+v, want the name and the zone label only", got)
	}
}

func TestZonesForbidden(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil)
	z, err := New(Config{Nodes: fake(watch.NewFake(), forbidden)})
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Run(context.Background()); err != nil {
		t.Errorf("Run: %v, want nil (zones off)", err)
	}
	if got := zoneOf(z, "n1"); got != "" {
		t.Errorf("zone %q, want none", got)
	}
}
