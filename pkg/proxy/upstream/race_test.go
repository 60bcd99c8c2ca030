//go:build race

package upstream

// raceEnabled: the race detector's build, where sync.Pool drops items at
// random and allocation counts mean nothing.
const raceEnabled = true
