package verbs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCreditsBoundOutstanding(t *testing.T) {
	c := newCredits(3)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := c.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fourth acquire: %v, want DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() { got <- c.acquire(ctx) }()
	select {
	case err := <-got:
		t.Fatalf("acquire without credits returned %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.grant(1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	c.grant(100) // a confused peer cannot inflate the grant
	if n := c.available(); n != 3 {
		t.Fatalf("available after over-grant: %d, want 3", n)
	}
	boom := errors.New("queue pair broke")
	c.close(boom)
	if err := c.acquire(ctx); !errors.Is(err, boom) {
		t.Fatalf("acquire after close: %v", err)
	}
}

// TestCreditsConcurrent: many goroutines never hold more than the grant.
func TestCreditsConcurrent(t *testing.T) {
	const limit = 4
	c := newCredits(limit)
	var inUse, peak atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := c.acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				n := inUse.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				inUse.Add(-1)
				c.grant(1)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("%d outstanding at once, grant was %d", p, limit)
	}
	if c.available() != limit {
		t.Fatalf("%d credits left, want %d", c.available(), limit)
	}
}

func TestCreditReturn(t *testing.T) {
	r := newCreditReturn(8)
	for i := 1; i <= 3; i++ {
		if r.consumed() {
			t.Fatalf("credit message after %d of 8", i)
		}
	}
	if !r.consumed() {
		t.Fatal("no credit message after half the grant")
	}
	if r.owed() != 4 {
		t.Fatalf("owed %d, want 4", r.owed())
	}
	if n := r.take(); n != 4 {
		t.Fatalf("took %d credits, want 4", n)
	}
	if n := r.take(); n != 0 {
		t.Fatalf("took %d credits twice", n)
	}
}
