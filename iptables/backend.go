package iptables

import (
	"context"
	"strings"
)

// Detect picks the backend to write with, the way kube-proxy's
// iptables-wrapper and Istio do: the rules of a network namespace must all
// live in one backend, because legacy and nft rules both apply to every
// packet and neither tool shows the other's. So Detect counts the rules
// iptables-legacy-save and iptables-nft-save print (IPv4 and IPv6) and
// prefers the backend that already holds more; on a tie, usually an empty
// namespace, it picks nft, the default of every current distribution. A
// backend whose tools fail to run is not considered.
func Detect(ctx context.Context, r Runner) (Backend, error) {
	legacy, legacyOK := countRules(ctx, r, Legacy)
	nft, nftOK := countRules(ctx, r, NFT)
	switch {
	case !legacyOK && !nftOK:
		return "", ErrNoBackend
	case !nftOK:
		return Legacy, nil
	case !legacyOK:
		return NFT, nil
	case legacy > nft:
		return Legacy, nil
	}
	return NFT, nil
}

// countRules returns how many rules (lines starting with "-") the save
// tools of backend b print for both families; ok is false when the IPv4
// tool cannot be run. A failing IPv6 tool counts as zero rules: hosts
// without IPv6 still have one backend to choose.
func countRules(ctx context.Context, r Runner, b Backend) (n int, ok bool) {
	for _, f := range []Family{IPv4, IPv6} {
		out, err := r.Run(ctx, nil, b.binary(f, "save"))
		if err != nil {
			if f == IPv4 {
				return 0, false
			}
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-") {
				n++
			}
		}
	}
	return n, true
}
