package fuse

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/sdk"
)

// readahead serves a sequential reader from windows of registered memory.
// The file is cut into aligned windows (window i holds bytes [i*W,
// (i+1)*W)); a sequential reader keeps the window it reads from and the
// next few fetched or in flight, each filled by one batched read (every
// chunk of the window, one call per storage node, the nodes pushing in
// parallel). Since windows are aligned, the kernel's requests may arrive
// in any order and still find theirs. Reads that are not sequential go
// to the mount's block cache (cache.go), or straight to the file without
// one, so random readers pay nothing for the windows.
//
// "Sequential" means: within slack of where the last read ended, three
// times in a row (the kernel's own readahead keeps several requests in
// flight, in any order; and a random reader of a large file should almost
// never set a window fetch off).
type readahead struct {
	c     *sdk.Client
	stats *Stats
	f     *sdk.File
	cache *blockCache // nil: none
	id    uint64      // this opening's, in the cache
	width int64       // W
	ahead int         // windows kept: the one being read and ahead-1 after it

	ctx    context.Context // ends fetches at close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	unpinned sync.Cond // on mu: a reply let its windows go
	wins     []*window // allocated at the first sequential read
	lastEnd  int64
	streak   int
	gen      uint64 // bumped by writes: windows of older generations are stale
}

type window struct {
	buf   *sdk.Buffer
	idx   int64 // which window of the file; -1 for none
	n     int   // bytes of the file in it (the last window is short)
	gen   uint64
	done  chan struct{} // closed when the fetch ends; err is set then
	err   error
	pins  int // replies pointing into it
	valid bool
}

// windowsAhead is how many windows a sequential reader keeps: the
// readahead budget is cut into this many.
const windowsAhead = 4

// slack: see readahead.
const slack = 16 << 20

// openings numbers the readaheads, for the cache's keys.
var openings atomic.Uint64

func newReadahead(c *sdk.Client, f *sdk.File, budget int, cache *blockCache, stats *Stats) *readahead {
	ctx, cancel := context.WithCancel(context.Background())
	width := max(int64(budget/windowsAhead), 1<<20)
	ra := &readahead{c: c, f: f, cache: cache, id: openings.Add(1), stats: stats, width: width, ahead: windowsAhead, ctx: ctx, cancel: cancel}
	ra.unpinned.L = &ra.mu
	return ra
}

// reply answers a read of len(p) bytes at off: pieces of p, read into it,
// and views of windows and cached blocks, pinned until the reply's Done;
// io.EOF past the file's end. On an error nothing stays pinned.
func (ra *readahead) reply(ctx context.Context, p []byte, off int64) (*reply, error) {
	r := &reply{ra: ra}
	size := ra.f.Size()
	if off >= size {
		return r, io.EOF
	}
	p = p[:min(int64(len(p)), size-off)]
	end := off + int64(len(p))
	ra.mu.Lock()
	if ra.lastEnd > 0 && off >= ra.lastEnd-slack && off <= ra.lastEnd+slack {
		ra.streak++
		ra.lastEnd = max(ra.lastEnd, end)
	} else {
		ra.streak, ra.lastEnd = 0, end
	}
	if ra.streak < 3 {
		gen := ra.gen
		ra.mu.Unlock()
		var err error
		if ra.cache != nil {
			err = ra.cache.read(ra, r, p, off, size, gen)
		} else {
			err = r.direct(p, off)
		}
		return r.unlessFailed(err)
	}
	first, last := off/ra.width, (end-1)/ra.width
	if err := ra.schedule(first, size); err != nil {
		ra.mu.Unlock()
		return r, err
	}
	var pinned []*window
	for i := first; i <= last; i++ {
		if w := ra.find(i); w != nil {
			w.pins++
			pinned = append(pinned, w)
		}
	}
	ra.mu.Unlock()
	r.wins = pinned // unpinned by Done, whether they serve or not
	for pos := off; pos < end; {
		stop := min(end, (pos/ra.width+1)*ra.width)
		var w *window
		for _, pw := range pinned {
			if pw.idx == pos/ra.width {
				w = pw
			}
		}
		if w == nil || w.wait(ctx) != nil || stop-w.idx*ra.width > int64(w.n) {
			// No window to spare, its fetch failed, or the file grew
			// past it: read directly.
			if err := r.direct(p[pos-off:stop-off], pos); err != nil {
				return r.unlessFailed(err)
			}
		} else {
			r.add(w.buf.B[pos-w.idx*ra.width : stop-w.idx*ra.width])
			ra.stats.ReadaheadBytes.Add(stop - pos)
		}
		pos = stop
	}
	return r, nil
}

// find returns the current window i, fetched or in flight (not failed).
func (ra *readahead) find(i int64) *window {
	for _, w := range ra.wins {
		if w.valid && w.idx == i && w.gen == ra.gen && !w.failed() {
			return w
		}
	}
	return nil
}

// failed reports whether the window's fetch is over and failed.
func (w *window) failed() bool {
	select {
	case <-w.done:
		return w.err != nil
	default:
		return false
	}
}

// schedule makes sure windows first..first+ahead-1 (those inside the
// file) are fetched or in flight, reusing windows behind first or stale
// ones, never one being read or still being filled.
func (ra *readahead) schedule(first, size int64) error {
	if ra.wins == nil {
		for i := 0; i < ra.ahead; i++ {
			buf, err := ra.c.NewBuffer(int(ra.width))
			if err != nil {
				return fmt.Errorf("readahead window: %w", err)
			}
			done := make(chan struct{})
			close(done)
			ra.wins = append(ra.wins, &window{buf: buf, idx: -1, done: done})
		}
	}
	for i := first; i < first+int64(ra.ahead) && i*ra.width < size; i++ {
		if ra.find(i) != nil {
			continue
		}
		w := ra.free(first)
		if w == nil {
			return nil // all busy: later reads schedule it
		}
		*w = window{buf: w.buf, idx: i, n: int(min(ra.width, size-i*ra.width)), gen: ra.gen, done: make(chan struct{}), valid: true}
		ra.background(func(ctx context.Context) {
			// Only w.err and w.buf change here, before done closes; the
			// rest is read under ra.mu.
			w.err = ra.c.ReadBatch(ctx, []sdk.ReadOp{{File: ra.f, Off: w.idx * ra.width, N: w.n, Buf: w.buf}})
			ra.stats.Windows.Add(1)
			close(w.done)
		})
	}
	return nil
}

// background runs fetch, a read ahead of the readers, on its own: close
// ends its context and waits for it. Called from reads only, which never
// overlap close.
func (ra *readahead) background(fetch func(ctx context.Context)) {
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		ctx, cancel := context.WithTimeout(ra.ctx, time.Minute)
		defer cancel()
		fetch(ctx)
	}()
}

// free returns a window that may be refilled: not pinned, its fetch over,
// and stale or behind first.
func (ra *readahead) free(first int64) *window {
	for _, w := range ra.wins {
		select {
		case <-w.done:
		default:
			continue
		}
		if w.pins == 0 && (!w.valid || w.gen != ra.gen || w.idx < first || w.err != nil) {
			return w
		}
	}
	return nil
}

// wait waits for the window's fetch to end.
func (w *window) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// invalidate makes every window and cached block stale: the file changed
// through the mount, or was opened again (an open sees what other clients
// wrote before it: close-to-open).
func (ra *readahead) invalidate() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.gen++
	ra.streak = 0
	if ra.cache != nil {
		ra.cache.drop(ra.id)
	}
}

// close stops the fetches and frees the windows, once no reply to the
// kernel still points into them.
func (ra *readahead) close() {
	ra.cancel()
	ra.wg.Wait()
	if ra.cache != nil {
		ra.cache.drop(ra.id)
	}
	ra.mu.Lock()
	for ra.pinned() {
		ra.unpinned.Wait()
	}
	ra.mu.Unlock()
	for _, w := range ra.wins {
		w.buf.Release()
	}
}

// pinned reports whether a reply holds a window (ra.mu held).
func (ra *readahead) pinned() bool {
	for _, w := range ra.wins {
		if w.pins > 0 {
			return true
		}
	}
	return false
}
