//go:build race

package wire

// raceEnabled: the race detector changes allocation sizes, so allocation
// bounds are only checked without it.
const raceEnabled = true
