package main

import (
	"testing"

	"github.com/sluicefs/sluice/sdk"
)

// TestProgressLine: moves done since the command started out of all it
// will have seen, with a bar on a terminal.
func TestProgressLine(t *testing.T) {
	start := sdk.MoveProgress{Done: 10, Cancelled: 1}
	now := sdk.MoveProgress{Done: 13, Cancelled: 2, ToGo: 2, InFlight: []sdk.Move{{Chain: 1, From: 2, To: 3}}}
	if got, want := progressLine(now, start, false), "moves 3/6 done, 1 in flight, 1 cancelled"; got != want {
		t.Errorf("plain: %q, want %q", got, want)
	}
	if got, want := progressLine(now, start, true), "[###############...............] moves 3/6 done, 1 in flight, 1 cancelled"; got != want {
		t.Errorf("terminal: %q, want %q", got, want)
	}
	if got, want := progressLine(start, start, true), "[##############################] moves 0/0 done, 0 in flight"; got != want {
		t.Errorf("nothing to do: %q, want %q", got, want)
	}
}
