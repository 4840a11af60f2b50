package shmring

import (
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBellWaitsWithoutAThread: a ring wakes its waiter, a wait without one
// ends at its timeout, and many goroutines waiting at once hold no thread
// each (they park in Go's poller; a wait in poll(2) took a thread apiece).
func TestBellWaitsWithoutAThread(t *testing.T) {
	b, err := NewBell()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t0 := time.Now()
	b.Wait(30)
	if d := time.Since(t0); d < 25*time.Millisecond || d > 5*time.Second {
		t.Fatalf("a wait of 30 ms with no ring took %v", d)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Ring()
	}()
	t0 = time.Now()
	b.Wait(10_000)
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("a rung bell woke its waiter after %v", d)
	}
	b.Ring()
	b.Wait(0) // takes the ring without waiting
	t0 = time.Now()
	b.Wait(20)
	if time.Since(t0) < 15*time.Millisecond {
		t.Fatal("Wait(0) left the ring behind")
	}

	// A received eventfd that is blocking becomes pollable too.
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	ob := OpenBell(fd)
	defer ob.Close()
	ob.Ring()
	t0 = time.Now()
	ob.Wait(10_000)
	if time.Since(t0) > 5*time.Second {
		t.Fatal("a ring of a received eventfd did not wake its waiter")
	}

	const waiters = 200
	bells := make([]*Bell, waiters)
	for i := range bells {
		if bells[i], err = NewBell(); err != nil {
			t.Fatal(err)
		}
	}
	threads := pprof.Lookup("threadcreate").Count()
	var wg sync.WaitGroup
	for _, bl := range bells {
		wg.Go(func() { bl.Wait(10_000) })
	}
	time.Sleep(200 * time.Millisecond) // all of them waiting
	if n := pprof.Lookup("threadcreate").Count() - threads; n > waiters/4 {
		t.Errorf("%d goroutines waiting on bells made %d threads", waiters, n)
	}
	for _, bl := range bells {
		bl.Ring()
	}
	wg.Wait()
	for _, bl := range bells {
		bl.Close()
	}
}
