package agent

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// ConvertWire is Convert for a NameTable in its wire form (as the discovery
// client keeps it): each name is decoded into one reused NameInfo and
// converted, so the whole table is never held as proto messages beside
// the entries. A name that appears twice is an error here (proto would
// keep the last); the control plane never sends one twice.
func ConvertWire(b []byte, lim Limits) ([]nametable.Entry, []string, error) {
	lim = lim.withDefaults()
	c := newCollector(0, lim)
	info := new(meshdnsv1.NameInfo)
	var names []string
	err := discovery.EachName(b, func(host string, raw []byte) error {
		if err := proto.Unmarshal(raw, info); err != nil {
			return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
		}
		return c.add(host, info)
	}, func(z string) error {
		names = append(names, z)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	zones, err := convertZones(names)
	if err != nil {
		return nil, nil, err
	}
	return c.done(), zones, nil
}

// buildWire builds the table of a wire-form NameTable for pod, feeding each
// converted name straight into the table's builder: neither the decoded
// table nor the converted entries are ever held whole (at 100,000 names
// they were ~40 and ~25 MB beside the table being built, the pod's peak),
// and a table walked from the state dir is not in memory at all.
// It returns the table and its number of names.
func buildWire(t discovery.WireTable, lim Limits, pod nametable.Context) (*nametable.Table, int, error) {
	lim = lim.withDefaults()
	// The zones come first: every name's negative answers need its zone.
	// They follow the names on the wire; finding them costs a skim.
	var names []string
	noName := func(string, []byte) error { return nil }
	if err := t(noName, func(z string) error { names = append(names, z); return nil }); err != nil {
		return nil, 0, err
	}
	c, _, err := newBuildingCollector(names, lim, pod)
	if err != nil {
		return nil, 0, err
	}
	info := new(meshdnsv1.NameInfo)
	err = t(func(host string, raw []byte) error {
		if err := proto.Unmarshal(raw, info); err != nil {
			return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
		}
		return c.add(host, info)
	}, func(string) error { return nil })
	if err != nil {
		return nil, 0, err
	}
	return c.into.Table(), c.n, nil
}
