// Package observe is the proxy's observer: it counts, times and logs what
// became of each query (the serving metrics, the answer histograms, the
// query log and its Tap, the failing-names summary), so the proxy's hot
// path decides and replies and hands one Outcome per query to Observe.
// It imports no proxy package: the proxy imports it.
package observe
