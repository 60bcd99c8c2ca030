package iptables

import (
	"io"
	"net/netip"

	"github.com/meshdns/meshdns/internal/resolvconf"
)

// ParseResolvConf returns the nameserver addresses of a resolv.conf(5)
// file to capture (Config.Nameservers): in file order, without scopes or
// duplicates. The file is parsed as the agent parses it
// (internal/resolvconf), so both see the same nameservers; an address that
// does not parse is an error, because capturing fewer nameservers than the
// pod uses would let some queries bypass the agent unnoticed.
func ParseResolvConf(r io.Reader) ([]netip.Addr, error) {
	rc, err := resolvconf.Read(r)
	if err != nil {
		return nil, err
	}
	return rc.Addrs(), nil
}
