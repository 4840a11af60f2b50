package dataset

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/sdk"
)

// arena is one region of memory (registered with the client, or a local
// agent's Iov) carved into the Arrow buffers of batches. Sample bytes land
// straight in it and Arrow arrays point at it, so a batch is built with no
// copy. A piece returns to the arena when
// the last Arrow buffer over it is released (the arena is their
// memory.Allocator); the mapping itself goes when the arena is closed and
// every piece is back. Its size is the loader's memory budget: allocation
// waits while the budget is in use.
type arena struct {
	mem  region
	b    []byte // mem's bytes
	base uintptr
	n    int // bytes, fixed at creation

	// stall is how long an allocation waits before it logs that the
	// budget is held (by batches not released, most likely).
	stall time.Duration
	log   *slog.Logger
	// waited counts the seconds allocations spent waiting for space
	// (sluice_loader_memory_wait_seconds_total).
	waited prometheus.Counter

	// budget is what allocations may hold in all (the region may be
	// larger: n). Past it an allocation waits, unless the loader's caller
	// is hungry: waiting in Next with nothing read ahead, so for the step
	// being allocated now. Then every piece is held by batches the caller
	// keeps, waiting would never end, and the arena grows to n, warning
	// once, and fails past n. The allowance is for one step: the loader
	// clears it (fed) when it hands that step on.
	budget int
	hungry bool
	grew   bool

	mu      sync.Mutex
	free    []span      // sorted by offset, coalesced
	used    map[int]int // offset -> size of pieces handed out
	inUse   int         // bytes handed out
	lost    int         // pieces quarantined (see quarantine)
	changed chan struct{}
	closed  bool
}

type span struct{ off, n int }

const align = 64 // Arrow's buffer alignment

// arenaSize rounds a budget up to the arena's alignment.
func arenaSize(n int) int { return (n + align - 1) &^ (align - 1) }

// newClientArena is an arena of memory registered with c (a memfd when
// shared).
func newClientArena(c *sdk.Client, size int, shared bool) (*arena, error) {
	size = arenaSize(size)
	r, err := newClientRegion(c, size, shared)
	if err != nil {
		return nil, fmt.Errorf("batch memory of %d bytes: %w", size, err)
	}
	return newArena(r, size, size, c), nil
}

// newArena carves the first size bytes of r, budget bytes at a time
// unless the caller starves (see arena.budget); c's metrics count its
// waits.
func newArena(r region, size, budget int, c *sdk.Client) *arena {
	b := r.bytes()[:size]
	// Fault the budget's pages in now (the rest, only a caller that keeps
	// batches touches): reads then land in memory already there, not in
	// pages the kernel zeroes one by one during the first epoch. Best
	// effort: kernels before 5.14 do not know the advice.
	_ = unix.Madvise(b[:min(budget, size)&^(os.Getpagesize()-1)], unix.MADV_POPULATE_WRITE)
	return &arena{mem: r, b: b, base: uintptr(unsafe.Pointer(&b[0])), n: size, budget: min(budget, size),
		free: []span{{0, size}}, used: map[int]int{}, changed: make(chan struct{}), stall: 10 * time.Second,
		log: slog.Default(), waited: c.Metrics().Loader.MemoryWait}
}

// setHungry says whether the loader's caller waits with nothing read
// ahead (see arena.budget); becoming hungry wakes a waiting allocation to
// look again.
func (a *arena) setHungry(h bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h && !a.hungry {
		close(a.changed)
		a.changed = make(chan struct{})
	}
	a.hungry = h
}

// fed ends a hungry allowance: the step it was for is on its way.
func (a *arena) fed() {
	a.mu.Lock()
	a.hungry = false
	a.mu.Unlock()
}

func (a *arena) size() int { return a.n }

// alloc reserves n bytes (64-byte aligned), waiting for space until ctx ends.
func (a *arena) alloc(ctx context.Context, n int) (int, error) {
	n = max(align, (n+align-1)&^(align-1))
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("loader closed")
	}
	if n > a.size() {
		return 0, fmt.Errorf("a batch buffer of %d bytes exceeds the loader's memory budget of %d bytes", n, a.size())
	}
	var warn <-chan time.Time
	var t0 time.Time // when the first wait began
	defer func() {
		if !t0.IsZero() {
			a.waited.Add(time.Since(t0).Seconds())
		}
	}()
	if a.stall > 0 {
		t := time.NewTicker(a.stall)
		defer t.Stop()
		warn = t.C
	}
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return 0, fmt.Errorf("loader closed")
		}
		over := a.inUse+n > a.budget
		hungry := a.hungry
		if !over || hungry {
			for i, s := range a.free {
				if s.n >= n {
					if s.n == n {
						a.free = append(a.free[:i], a.free[i+1:]...)
					} else {
						a.free[i] = span{s.off + n, s.n - n}
					}
					a.used[s.off] = n
					a.inUse += n
					grew := over && !a.grew
					a.grew = a.grew || over
					held, inUse := len(a.used), a.inUse
					a.mu.Unlock()
					if grew {
						a.log.Warn("dataset loader: batches kept by the caller fill the memory budget; growing past it to its hard limit. Release batches when done with them (Batch.Release; in Python, drop the batch and the arrays and tensors made from it)",
							"budget_bytes", a.budget, "hard_limit_bytes", a.n, "in_use_bytes", inUse, "pieces_held", held)
					}
					return s.off, nil
				}
			}
			if hungry {
				held, inUse := len(a.used), a.inUse
				a.mu.Unlock()
				return 0, fmt.Errorf("batches kept by the caller (%d pieces, %d bytes) fill the loader's memory up to its hard limit of %d bytes (twice the prefetch budget): release batches when done with them (Batch.Release; in Python, drop the batch and the arrays and tensors made from it), or raise the prefetch budget",
					held, inUse, a.n)
			}
		}
		wait := a.changed
		a.mu.Unlock()
		if t0.IsZero() {
			t0 = time.Now()
		}
		select {
		case <-wait:
		case <-warn:
			a.mu.Lock()
			held := len(a.used)
			a.mu.Unlock()
			a.log.Warn("dataset loader: waiting for batch memory; release batches when done with them (Batch.Release) or raise the prefetch budget",
				"waited", a.stall, "need_bytes", n, "budget_bytes", a.size(), "pieces_held", held)
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for batch memory: %w", ctx.Err())
		}
	}
}

// buffer wraps piece [off, off+n) as an Arrow buffer that gives the piece
// back when released.
func (a *arena) buffer(off, n int) *memory.Buffer {
	a.mu.Lock()
	end := off + a.used[off]
	a.mu.Unlock()
	return memory.NewBufferWithAllocator(a.b[off:off+n:end], a)
}

// release gives a piece back.
func (a *arena) release(off int) {
	a.mu.Lock()
	n, ok := a.used[off]
	if !ok {
		a.mu.Unlock()
		panic(fmt.Sprintf("dataset: arena piece at %d released twice", off))
	}
	delete(a.used, off)
	a.inUse -= n
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, n}
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	close(a.changed)
	a.changed = make(chan struct{})
	done := a.closed && len(a.used) == a.lost
	a.mu.Unlock()
	if done {
		a.mem.release()
	}
}

// quarantine keeps a piece out of use until the arena closes: a read into
// it failed, and the storage node may still be writing to it. Closing
// deregisters the memory first, which revokes any write still to come.
func (a *arena) quarantine(off int) {
	a.mu.Lock()
	if _, ok := a.used[off]; ok {
		a.lost++
	}
	done := a.closed && len(a.used) == a.lost
	a.mu.Unlock()
	if done {
		a.mem.release()
	}
}

// close stops new allocations; the memory is unmapped once every piece
// handed out is back.
func (a *arena) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	close(a.changed)
	a.changed = make(chan struct{})
	done := len(a.used) == a.lost
	a.mu.Unlock()
	if done {
		a.mem.release()
	}
}

// Free is memory.Allocator's: Arrow calls it when a buffer's last
// reference is released.
func (a *arena) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	a.release(int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - a.base))
}

// Allocate and Reallocate are never called: arena buffers are immutable.
func (a *arena) Allocate(int) []byte { panic("dataset: arena buffers are not resizable") }

func (a *arena) Reallocate(int, []byte) []byte {
	panic("dataset: arena buffers are not resizable")
}
