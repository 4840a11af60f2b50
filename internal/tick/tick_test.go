package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery: calls come at the period and stop when the context ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, 5*time.Millisecond, func() {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d calls, want 3 (none after the context ended)", got)
	}
}
