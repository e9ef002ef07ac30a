//go:build race

package config

// raceEnabled: the race detector slows parsing about tenfold, which the
// CPU-time bounds of the tests allow for.
const raceEnabled = true
