package kubesource

import (
	"slices"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// entrySet is the current entry of every service, keyed by ns/name, with
// the keys kept sorted so a snapshot is one ordered copy rather than a sort
// of every entry each time one service changes (at 11,000 services the
// sort cost far more than the rebuild). It is owned by the Run goroutine.
type entrySet struct {
	byKey map[string]registry.Entry
	keys  []string // sorted
}

func newEntrySet() *entrySet { return &entrySet{byKey: map[string]registry.Entry{}} }

func (s *entrySet) len() int { return len(s.keys) }

func (s *entrySet) get(key string) (registry.Entry, bool) {
	e, ok := s.byKey[key]
	return e, ok
}

// set stores e under key.
func (s *entrySet) set(key string, e registry.Entry) {
	if _, ok := s.byKey[key]; !ok {
		i, _ := slices.BinarySearch(s.keys, key)
		s.keys = slices.Insert(s.keys, i, key)
	}
	s.byKey[key] = e
}

// remove deletes key and reports whether it was there.
func (s *entrySet) remove(key string) bool {
	if _, ok := s.byKey[key]; !ok {
		return false
	}
	delete(s.byKey, key)
	if i, ok := slices.BinarySearch(s.keys, key); ok {
		s.keys = slices.Delete(s.keys, i, i+1)
	}
	return true
}

// snapshot returns every entry in key order, in a new slice the caller
// owns (the entries' inner slices are shared and never modified).
func (s *entrySet) snapshot() []registry.Entry {
	out := make([]registry.Entry, len(s.keys))
	for i, k := range s.keys {
		out[i] = s.byKey[k]
	}
	return out
}
