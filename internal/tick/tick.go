// Package tick owns the loop behind Sluice's background chores (the
// chunk collector, the failure detector, heartbeats, read-lease renewal):
// call a function at a fixed period until a context ends.
package tick

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends, the first time d after it starts.
// A call that runs long delays the next one; ticks missed meanwhile are
// dropped, not queued.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			return
		}
		fn()
	}
}
