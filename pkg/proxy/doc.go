// Package proxy is the agent's DNS server (docs/design.md, "Answer rules"):
// UDP and TCP listeners and a Handler that answers from the current
// nametable.Table and hands the rest to a Resolver (pkg/proxy/upstream).
//
// The hot path reads queries straight from the packet and answers known
// names, search-expanded names and authoritative NXDOMAIN from replies
// packed once per table and question, so it allocates nothing per query
// and costs little more CPU than a UDP reflector; see README.md and
// hack/benchdns for the figures.
package proxy
