package discovery

import (
	"github.com/meshdns/meshdns/internal/namewire"
)

// Version is a table version the client hands to Config.Apply.
type Version struct {
	id       string
	walk     namewire.RawTable
	shape    *namewire.Shape // or nil
	settings *namewire.AgentSettings
}

// Names is the number of names of the table when the client counted them
// as it received the table, else 0.
func (v *Version) Names() int {
	if v.shape == nil {
		return 0
	}
	return v.shape.Names
}

// Settings returns the agent settings of the version (the full table's, or
// those a delta carried or kept), or nil when it has none. The caller must
// not modify them.
func (v *Version) Settings() *namewire.AgentSettings { return v.settings }

// ID is the control plane's version_info of the table.
func (v *Version) ID() string { return v.id }

// Walk walks the table's names in wire form (see Config.Apply for how
// long it may). When the client noted the zones as it received the table,
// they come first, so a build takes one walk.
func (v *Version) Walk(name func(host, info []byte) error, zone func(zone string) error) error {
	if v.shape == nil {
		return v.walk(name, zone)
	}
	for _, z := range v.shape.Zones {
		if zone == nil {
			break
		}
		if err := zone(z); err != nil {
			return err
		}
	}
	if name == nil {
		return nil
	}
	return v.walk(name, nil)
}
