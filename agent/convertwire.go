package agent

import (
	"errors"
	"fmt"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// ConvertWire is Convert for a NameTable in its wire form (as the discovery
// client keeps it): each name is decoded into one reused NameInfo (namewire) and
// converted, so the whole table is never held as proto messages beside
// the entries. A name that appears twice is an error here (proto would
// keep the last); the control plane never sends one twice.
func ConvertWire(b []byte, lim Limits) ([]nametable.Entry, []string, error) {
	lim = lim.withDefaults()
	c := newCollector(0, lim)
	info := new(namewire.NameInfo)
	var names []string
	err := discovery.EachName(b, func(host string, raw []byte) error {
		if err := info.Unmarshal(raw); err != nil {
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
//
// The builder needs the zones before the first name. A table whose zones
// come first (the state files the discovery client writes) is built in
// one pass; otherwise (the control plane's order: the zones follow the
// names) a skim finds the zones and a second walk builds.
func buildWire(t discovery.WireTable, lim Limits, pod nametable.Context) (*nametable.Table, int, error) {
	lim = lim.withDefaults()
	var zones []string
	var c *collector
	info := new(namewire.NameInfo)
	add := func(host string, raw []byte) error {
		if err := info.Unmarshal(raw); err != nil {
			return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
		}
		return c.add(host, info)
	}
	err := t(func(host string, raw []byte) error {
		if c == nil {
			if len(zones) == 0 {
				return errZonesLater
			}
			var err error
			if c, _, err = newBuildingCollector(zones, lim, pod); err != nil {
				return err
			}
		}
		return add(host, raw)
	}, func(z string) error {
		if c != nil {
			return errZonesLater
		}
		zones = append(zones, z)
		return nil
	})
	switch {
	case err == nil && c == nil:
		// Zones and no names (or nothing at all).
		if c, _, err = newBuildingCollector(zones, lim, pod); err != nil {
			return nil, 0, err
		}
	case errors.Is(err, errZonesLater):
		zones = zones[:0]
		if err := t(nil, func(z string) error { zones = append(zones, z); return nil }); err != nil {
			return nil, 0, err
		}
		if c, _, err = newBuildingCollector(zones, lim, pod); err != nil {
			return nil, 0, err
		}
		if err := t(add, nil); err != nil {
			return nil, 0, err
		}
	case err != nil:
		return nil, 0, err
	}
	return c.into.Table(), c.n, nil
}

// errZonesLater stops a one-pass build at a name before any zone, or a
// zone after names.
var errZonesLater = errors.New("zones after names")
