package fuse

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sluicefs/sluice/sdk"
)

// readahead serves a sequential reader from windows of registered memory,
// each filled by one batched read (every chunk of the window, one call per
// storage node, the nodes pushing in parallel). While the reader consumes
// one window the next is fetched in the background. Reads that are not
// sequential go straight to the file, untouched by the windows, so random
// readers pay nothing for it.
//
// The kernel sends a sequential reader's requests a few at a time and not
// always in order, so "sequential" means: within slack of where the last
// read ended, twice in a row.
type readahead struct {
	c      *sdk.Client
	f      *sdk.File
	window int

	ctx    context.Context // ends background fetches at close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	wins    [2]*window // allocated at the first sequential run
	cur     *window    // serving
	next    *window    // being fetched, or fetched
	lastEnd int64
	streak  int
	gen     uint64 // bumped by writes: older windows are stale
}

type window struct {
	buf  *sdk.Buffer
	off  int64
	n    int
	gen  uint64
	done chan struct{} // closed when the fetch into buf ends
	err  error
}

// slack is how far from the last read's end a read may start and still
// count as sequential: a few of the kernel's requests in flight.
const slack = 4 << 20

func newReadahead(c *sdk.Client, f *sdk.File, window int) *readahead {
	ctx, cancel := context.WithCancel(context.Background())
	return &readahead{c: c, f: f, window: window, ctx: ctx, cancel: cancel}
}

func (w *window) has(pos int64) bool { return w != nil && pos >= w.off && pos < w.off+int64(w.n) }

// wait waits for the window's fetch to end.
func (w *window) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read reads p at off: io.EOF past the file's end.
func (ra *readahead) read(ctx context.Context, p []byte, off int64) (int, error) {
	size := ra.f.Size()
	if off >= size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), size-off)]
	end := off + int64(len(p))
	ra.mu.Lock()
	near := ra.lastEnd > 0 && off >= ra.lastEnd-slack && off <= ra.lastEnd+slack
	if near || ra.cur.has(off) {
		ra.streak++
		ra.lastEnd = max(ra.lastEnd, end)
	} else {
		ra.streak, ra.lastEnd = 0, end
	}
	if ra.streak < 2 {
		ra.mu.Unlock()
		return ra.f.ReadAt(p, off)
	}
	defer ra.mu.Unlock()
	for got := 0; got < len(p); {
		pos := off + int64(got)
		if ra.cur.has(pos) {
			got += copy(p[got:], ra.cur.buf.B[pos-ra.cur.off:ra.cur.n])
			continue
		}
		if w := ra.next; w != nil && pos >= w.off && pos < w.off+int64(ra.window) {
			ra.next = nil
			if err := w.wait(ctx); err != nil || w.gen != ra.gen || !w.has(pos) {
				continue // stale or failed: fetched again below
			}
			ra.cur = w
			continue
		}
		w, err := ra.spare(ctx)
		if err != nil {
			return got, err
		}
		ra.prepare(w, pos, size)
		ra.fill(ctx, w)
		if w.err != nil {
			return got, w.err
		}
		ra.cur = w
	}
	// Past the middle of the window: fetch the next one meanwhile.
	if cur := ra.cur; ra.next == nil && cur != nil && off+int64(len(p)) > cur.off+int64(cur.n/2) && cur.off+int64(cur.n) < size {
		if w, err := ra.spare(ctx); err == nil {
			ra.next = w
			ra.prepare(w, cur.off+int64(cur.n), size)
			ra.wg.Add(1)
			go func() {
				defer ra.wg.Done()
				fctx, cancel := context.WithTimeout(ra.ctx, time.Minute)
				defer cancel()
				ra.fill(fctx, w)
			}()
		}
	}
	return len(p), nil
}

// spare returns a window that is neither serving nor being fetched into,
// allocating the two windows at first use.
func (ra *readahead) spare(ctx context.Context) (*window, error) {
	for i, w := range ra.wins {
		if w == nil {
			buf, err := ra.c.NewBuffer(ra.window)
			if err != nil {
				return nil, fmt.Errorf("readahead window: %w", err)
			}
			w = &window{buf: buf, done: make(chan struct{})}
			close(w.done)
			ra.wins[i] = w
		}
		if w != ra.cur && w != ra.next {
			// A stale fetch may still be filling it.
			if err := w.wait(ctx); err != nil && ctx.Err() != nil {
				return nil, err
			}
			return w, nil
		}
	}
	// Both in use: the serving window gives way.
	ra.cur = nil
	return ra.spare(ctx)
}

// prepare points w at the file from pos (up to the window's size and the
// file's end), under ra.mu; fill then reads the bytes in.
func (ra *readahead) prepare(w *window, pos, size int64) {
	*w = window{buf: w.buf, off: pos, n: int(min(int64(ra.window), size-pos)), gen: ra.gen, done: make(chan struct{})}
}

// fill reads w's bytes in one batched read; it touches only w.buf and
// w.err, so it may run without ra.mu.
func (ra *readahead) fill(ctx context.Context, w *window) {
	w.err = ra.c.ReadBatch(ctx, []sdk.ReadOp{{File: ra.f, Off: w.off, N: w.n, Buf: w.buf, BufOff: 0}})
	close(w.done)
}

// invalidate drops the windows: the file changed.
func (ra *readahead) invalidate() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.gen++
	ra.cur, ra.next = nil, nil
	ra.streak = 0
}

// close stops background fetches and frees the windows.
func (ra *readahead) close() {
	ra.cancel()
	ra.wg.Wait()
	for _, w := range ra.wins {
		if w != nil {
			w.buf.Release()
		}
	}
}
