package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The names of the simulated cluster live under one zone; the marker is
// the one name every change rewrites (markerName).
const (
	zone       = "churn.example"
	markerName = "churn-seq." + zone
	hotFile    = "hot.yaml"
	staticPer  = 100 // Services per static file
)

// cluster is the simulated cluster's DNS content as entries files: the
// Services that never change spread over static files, and one hot file
// holding everything that churns (the headless Services' endpoints, the
// Services created and deleted) and the marker. The marker's address
// encodes the sequence number of the last change written, so the version
// that carries a marker value carries every change up to it: a change and
// its marker are one rename of one file, read whole by the control plane.
type cluster struct {
	dir string
	rnd *rand.Rand
	// seq is the number of changes written.
	seq int
	// endpoints is the target endpoint count of a headless Service.
	endpoints int
	headless  [][]netip.Addr // endpoint addresses by headless Service
	lines     []string       // each headless Service's rendered entry, redone when it changes
	hot       []int          // ids of the created Services (svc-c<id>)
	nextSvc   int            // the next created Service's id
	nextIP    uint32         // the next endpoint or Service address
}

// newCluster writes the static files and the first hot file.
func newCluster(dir string, seed uint64, services, headless, hotServices, endpoints int) (*cluster, error) {
	c := &cluster{dir: dir, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), endpoints: endpoints}
	static := max(services-headless-hotServices, 0)
	for f := 0; f*staticPer < static || f == 0; f++ {
		var sb strings.Builder
		if f == 0 {
			sb.WriteString("zones: [" + zone + "]\n")
		}
		if static == 0 {
			sb.WriteString("entries: []\n")
		} else {
			sb.WriteString("entries:\n")
		}
		for i := f * staticPer; i < min(static, (f+1)*staticPer); i++ {
			fmt.Fprintf(&sb, "  - {hostname: svc-s%d.%s, addresses: [%s], ports: [{name: http, port: 80}]}\n", i, zone, c.addr())
		}
		if err := writeFile(dir, fmt.Sprintf("static-%04d.yaml", f), sb.String()); err != nil {
			return nil, err
		}
	}
	c.headless = make([][]netip.Addr, headless)
	c.lines = make([]string, headless)
	for k := range c.headless {
		for range endpoints {
			c.headless[k] = append(c.headless[k], c.addr())
		}
		c.render(k)
	}
	for range hotServices {
		c.hot = append(c.hot, c.nextSvc)
		c.nextSvc++
	}
	return c, c.write()
}

// addr hands out addresses in 10.0.0.0/8, none twice.
func (c *cluster) addr() netip.Addr {
	c.nextIP++
	n := c.nextIP
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// createService adds a Service to the hot file.
func (c *cluster) createService() error {
	c.hot = append(c.hot, c.nextSvc)
	c.nextSvc++
	return c.change()
}

// deleteService removes a random created Service, if any is left.
func (c *cluster) deleteService() error {
	if len(c.hot) == 0 {
		return c.change()
	}
	k := c.rnd.IntN(len(c.hot))
	c.hot = slices.Delete(c.hot, k, k+1)
	return c.change()
}

// endpointChange adds or removes one endpoint of a random headless
// Service (a pod of it started or stopped), keeping between half and one
// and a half times the target count.
func (c *cluster) endpointChange() error {
	if len(c.headless) == 0 {
		return c.change()
	}
	k := c.rnd.IntN(len(c.headless))
	eps := c.headless[k]
	grow := c.rnd.IntN(2) == 0
	switch {
	case len(eps) <= max(c.endpoints/2, 1):
		grow = true
	case len(eps) >= c.endpoints*3/2:
		grow = false
	}
	if grow {
		c.headless[k] = append(eps, c.addr())
	} else {
		i := c.rnd.IntN(len(eps))
		c.headless[k] = slices.Delete(eps, i, i+1)
	}
	c.render(k)
	return c.change()
}

func (c *cluster) change() error {
	c.seq++
	return c.write()
}

// write renders the hot file with the marker of c.seq and renames it
// into place, as a ConfigMap update or an editor's save does.
func (c *cluster) write() error {
	var sb strings.Builder
	sb.Grow(64 + len(c.headless)*(64+16*c.endpoints) + len(c.hot)*96)
	sb.WriteString("entries:\n")
	fmt.Fprintf(&sb, "  - {hostname: %s, addresses: [%s]}\n", markerName, seqAddr(c.seq))
	for _, l := range c.lines {
		sb.WriteString(l)
	}
	for _, id := range c.hot {
		fmt.Fprintf(&sb, "  - {hostname: svc-c%d.%s, addresses: [%s], ports: [{name: http, port: 80}]}\n", id, zone, svcAddr(id))
	}
	return writeFile(c.dir, hotFile, sb.String())
}

// render makes headless Service k's entry line: the tool writes the hot
// file 20 times a second and shares the cores with what it measures.
func (c *cluster) render(k int) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  - {hostname: hl-%d.%s, ports: [{name: peer, port: 7000}], addresses: [", k, zone)
	for i, a := range c.headless[k] {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(a.String())
	}
	sb.WriteString("]}\n")
	c.lines[k] = sb.String()
}

// svcAddr is a created Service's cluster IP, from its id (in 11.0.0.0/8,
// apart from the endpoints).
func svcAddr(id int) netip.Addr {
	return netip.AddrFrom4([4]byte{11, byte(id >> 16), byte(id >> 8), byte(id)})
}

// seqAddr encodes a change's sequence number as the marker's address.
func seqAddr(seq int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, byte(seq >> 16), byte(seq >> 8), byte(seq)})
}

// addrSeq decodes seqAddr; -1 for anything else.
func addrSeq(s string) int {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || a.As4()[0] != 100 {
		return -1
	}
	b := a.As4()
	return int(b[1])<<16 | int(b[2])<<8 | int(b[3])
}

// writeFile replaces dir/name whole (write beside, rename), so the
// control plane never reads half a file.
func writeFile(dir, name, content string) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	return nil
}
