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
