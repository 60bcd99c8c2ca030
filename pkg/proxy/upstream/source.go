package upstream

// Source says where a reply came from.
type Source uint8

const (
	// SourceCache: built from a cached reply (fresh, or stale when every
	// upstream failed).
	SourceCache Source = iota
	// SourceUpstream: an upstream answered this query (or the in-flight
	// query it was coalesced with).
	SourceUpstream
)

// String returns the metric label value: "cache" or "upstream".
func (s Source) String() string {
	switch s {
	case SourceCache:
		return "cache"
	case SourceUpstream:
		return "upstream"
	}
	return "unknown"
}
