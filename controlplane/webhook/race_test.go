//go:build race

package webhook

// raceEnabled: the race detector makes every byte copied cost ten times
// as much, and the flood's own clients run in the test's process.
const raceEnabled = true
