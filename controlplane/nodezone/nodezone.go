// Package nodezone knows the topology zone of every node, from a
// metadata-only watch of Nodes, and gives each agent its pod's zone as a
// settings part: the zone of the node its verified credential names.
package nodezone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/internal/metawatch"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Label is the well-known node label of its zone.
const Label = "topology.kubernetes.io/zone"

// Config configures Zones.
type Config struct {
	// Nodes lists and watches Nodes as metav1.PartialObjectMetadata
	// (ListerWatcher gives the production one); required.
	Nodes cache.ListerWatcher
	// Logger; nil discards.
	Logger *slog.Logger
}

// Zones is the settings part of the pod's zone. Fill is empty until the
// first list of Nodes arrived (the zone only orders answers, so agents
// are not held for it; they get it in a delta once it is known).
type Zones struct {
	agentsettings.Notifier
	cfg Config
	log *slog.Logger

	mu     sync.RWMutex      // guards following
	byNode map[string]string // node name -> zone; nodes without one absent
}

var (
	_ agentsettings.Part   = (*Zones)(nil)
	_ agentsettings.Runner = (*Zones)(nil)
)

// New returns Zones; Run watches.
func New(cfg Config) (*Zones, error) {
	if cfg.Nodes == nil {
		return nil, errors.New("nodezone: Nodes is required")
	}
	return &Zones{cfg: cfg, log: deps.Logger(cfg.Logger), byNode: map[string]string{}}, nil
}

// ListerWatcher lists and watches the metadata of Nodes on the API server
// rc reaches (get, list and watch on nodes): labels only, never a node's
// status, which changes far more often than its zone.
func ListerWatcher(rc *rest.Config) (cache.ListerWatcher, error) {
	c, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("nodezone: metadata client: %w", err)
	}
	// client-go's ListWatch of this version passes no context; the
	// reflector bounds each call with the options' timeout and stops a
	// watch through its result.
	return metawatch.ListWatch(context.TODO(), c, schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", ""), nil
}

// Fill sets the zone of the agent's node, when its credential names one.
func (z *Zones) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) {
	if id.Node == "" {
		return
	}
	if zone := z.Zone(id.Node); zone != "" {
		s.PodZone = zone
	}
}

// Zone returns the zone of node, or "".
func (z *Zones) Zone(node string) string {
	z.mu.RLock()
	defer z.mu.RUnlock()
	return z.byNode[node]
}

// Run watches Nodes until ctx ends; it returns nil then. Without the
// right to list Nodes (an install whose RBAC predates pod zones, or the
// VM-facing control plane) it logs so once and leaves zones unknown,
// rather than retrying and logging forever; a restart picks up RBAC
// granted later.
func (z *Zones) Run(ctx context.Context) error {
	if _, err := z.cfg.Nodes.List(metav1.ListOptions{Limit: 1}); apierrors.IsForbidden(err) {
		z.log.Warn("cannot list nodes: pod zones off (grant get, list and watch on nodes, or pass --pod-zone=false)", "err", err)
		return nil
	}
	z.log.Info("watching node zones", "label", Label)
	// Keep a node's name and zone only: its other labels, annotations and
	// managed fields are most of its metadata.
	return metawatch.Watch{ListWatch: z.cfg.Nodes, Keep: metawatch.Label(Label), On: z.set}.Run(ctx)
}

// set records the zone of the node obj (none when deleted) and announces
// a change only when the zone changed: node updates are frequent, zone
// changes rare.
func (z *Zones) set(m *metav1.PartialObjectMetadata, deleted bool) {
	zone := ""
	if !deleted {
		zone = m.Labels[Label]
	}
	z.mu.Lock()
	old := z.byNode[m.Name]
	if zone == "" {
		delete(z.byNode, m.Name)
	} else {
		z.byNode[m.Name] = zone
	}
	z.mu.Unlock()
	if old != zone {
		z.Notify()
	}
}
