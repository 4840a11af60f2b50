//go:build race

package crc32c

// raceEnabled: under the race detector Copy copies with the built-in copy,
// which the detector sees (it cannot see the assembly's stores), then
// sums; the fused loop is tested by the plain run.
const raceEnabled = true
