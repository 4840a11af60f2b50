package fuse

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicefs/sluice/sdk"
)

// writeBehind lets write(2) return once the mount holds the bytes, as a
// local file system's page cache does: sequential writes gather into one
// buffer per chunk, a full buffer goes to its chain at once, and several
// buffers are in flight together, so a sequential writer keeps every chain
// busy instead of waiting for each write's replication. What must see the
// bytes waits for them (a barrier): flush and fsync (so close and fsync
// report a failed write, and the length published covers only stored
// bytes), reads, truncation, fallocate and the last close. The bytes in
// flight are bounded by the mount's budget (a buffer waits for its share
// before it is sent, and in-flight writes always end, so waiting cannot
// deadlock); each open file also fills at most one buffer (a unit) before
// sending it.
//
// Buffers that overlap are never in flight together, so a rewrite lands
// after the write it replaces.
type writeBehind struct {
	budget *budget
	unit   int64  // a buffer's most: the chunk size, or less
	landed func() // called when a buffer's write ends, before barriers see it

	mu     sync.Mutex
	cond   sync.Cond  // a sent buffer finished
	open   *pending   // being filled, not yet sent
	flying []*pending // sent, not finished
	end    int64      // the furthest end of a write taken
	err    error      // the first failed write, until a barrier reports it
	wg     sync.WaitGroup
}

// pending is one buffer of bytes at off.
type pending struct {
	off   int64
	buf   []byte
	limit int64 // the end the buffer may grow to
}

func (p *pending) end() int64 { return p.off + int64(len(p.buf)) }

// newWriteBehind writes behind within budget b in buffers of at most a
// chunk; landed is called each time a buffer's write has ended (the
// readahead's windows fetched while it was on its way are stale then).
func newWriteBehind(b *budget, chunkSize uint32, landed func()) *writeBehind {
	unit := int64(chunkSize)
	if unit <= 0 || unit > maxUnit {
		unit = maxUnit
	}
	w := &writeBehind{budget: b, unit: unit, landed: landed}
	w.cond.L = &w.mu
	return w
}

// maxUnit bounds one buffer where chunks are large.
const maxUnit = 4 << 20

// write takes p at off, sending each buffer it fills to f; it returns
// what f.WriteAt would refuse at once, or a failed earlier write's error
// (once), instead.
func (w *writeBehind) write(f *sdk.File, timeout func() (context.Context, context.CancelFunc), p []byte, off int64) (int, error) {
	if err := f.CheckWrite(off, len(p)); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.err; err != nil {
		w.err = nil
		return 0, err
	}
	for done := 0; done < len(p); {
		at := off + int64(done)
		if w.open == nil || at != w.open.end() {
			w.sendOpen(f, timeout)
			w.open = &pending{off: at, limit: (at/w.unit + 1) * w.unit}
		}
		o := w.open
		n := int(min(int64(len(p)-done), o.limit-at))
		o.buf = append(o.buf, p[done:done+n]...)
		done += n
		w.end = max(w.end, o.end())
		if o.end() == o.limit {
			w.sendOpen(f, timeout)
		}
	}
	return len(p), nil
}

// sendOpen sends the open buffer, once no buffer it overlaps is in
// flight and the budget has room for it. w.mu is held (finishing writes
// give their budget back without it).
func (w *writeBehind) sendOpen(f *sdk.File, timeout func() (context.Context, context.CancelFunc)) {
	o := w.open
	if o == nil {
		return
	}
	w.open = nil
	for w.overlaps(o) {
		w.cond.Wait()
	}
	w.budget.acquire(int64(len(o.buf)))
	w.flying = append(w.flying, o)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := timeout()
		_, err := f.WriteAtContext(ctx, o.buf, o.off)
		cancel()
		w.landed()
		w.budget.release(int64(len(o.buf)))
		w.mu.Lock()
		for i, q := range w.flying {
			if q == o {
				w.flying = append(w.flying[:i], w.flying[i+1:]...)
				break
			}
		}
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("write [%d:+%d] behind: %w", o.off, len(o.buf), err)
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
}

func (w *writeBehind) overlaps(o *pending) bool {
	for _, q := range w.flying {
		if q.off < o.limit && o.off < q.limit {
			return true
		}
	}
	return false
}

// barrier sends what is buffered, waits for every write in flight, and
// returns the first that failed since the last barrier.
func (w *writeBehind) barrier(f *sdk.File, timeout func() (context.Context, context.CancelFunc)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sendOpen(f, timeout)
	for len(w.flying) > 0 {
		w.cond.Wait()
	}
	err := w.err
	w.err = nil
	return err
}

// idle reports whether nothing is buffered or in flight (a barrier would
// not wait).
func (w *writeBehind) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open == nil && len(w.flying) == 0 && w.err == nil
}

// size is the furthest end of the writes taken.
func (w *writeBehind) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// truncated forgets written ends past n (the file was cut to n).
func (w *writeBehind) truncated(n int64) {
	w.mu.Lock()
	w.end = min(w.end, n)
	w.mu.Unlock()
}

// budget is the mount's bound on the bytes write-behind holds.
type budget struct {
	mu    sync.Mutex
	cond  sync.Cond
	left  int64
	total int64
}

func newBudget(n int64) *budget {
	b := &budget{left: n, total: n}
	b.cond.L = &b.mu
	return b
}

// acquire takes n bytes, waiting while others hold them; a request larger
// than the whole budget waits for all of it.
func (b *budget) acquire(n int64) {
	n = min(n, b.total)
	b.mu.Lock()
	for b.left < n {
		b.cond.Wait()
	}
	b.left -= n
	b.mu.Unlock()
}

func (b *budget) release(n int64) {
	n = min(n, b.total)
	b.mu.Lock()
	b.left += n
	b.cond.Broadcast()
	b.mu.Unlock()
}
