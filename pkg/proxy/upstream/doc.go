// Package upstream forwards the questions the agent cannot answer from its
// name table to the pod's upstream resolvers, and caches the replies
// (docs/design.md, Forwarding).
//
// A Resolver sends each query from a fresh UDP socket (a new random source
// port) with a random ID and EDNS0 UDP size 1232, accepts only a reply whose
// ID, name, type and class match, retries truncated replies over TCP, tries
// the upstreams in random order (or races them), coalesces identical
// in-flight questions, bounds the number of upstream queries in flight, and
// keeps a TTL-respecting cache of packed replies with negative caching
// (RFC 2308) and serve-stale (RFC 8767). Cache hits allocate nothing.
package upstream
