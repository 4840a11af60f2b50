//go:build !race

package crc32c

const raceEnabled = false
