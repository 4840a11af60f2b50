package dataset

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/shmring"
)

// rangeRead is a byte range of a shard to read into the arena at dst.
type rangeRead struct {
	shard int
	off   int64
	n     int
	dst   int
}

// region is the memory an arena carves batches from, and the way shard
// bytes get into it: memory registered with this process's cluster client
// (storage pushes into it over the fabric), or the Iov shared with a local
// agent (the agent reads into it, and this process never touches a socket).
type region interface {
	bytes() []byte
	// fd is the memfd behind the memory, -1 when it has none.
	fd() int
	// read fills the ranges from d's shards.
	read(ctx context.Context, d *Dataset, rs []rangeRead) error
	// release unmaps the memory; nothing writes into it afterwards.
	release() error
}

// clientRegion is memory registered with the cluster client.
type clientRegion struct {
	c   *sdk.Client
	buf *sdk.Buffer
}

func newClientRegion(c *sdk.Client, size int, shared bool) (*clientRegion, error) {
	newBuffer := c.NewBuffer
	if shared {
		newBuffer = c.NewSharedBuffer
	}
	buf, err := newBuffer(size)
	if err != nil {
		return nil, err
	}
	return &clientRegion{c: c, buf: buf}, nil
}

func (r *clientRegion) bytes() []byte  { return r.buf.B }
func (r *clientRegion) fd() int        { return r.buf.Fd() }
func (r *clientRegion) release() error { return r.buf.Release() }

func (r *clientRegion) read(ctx context.Context, d *Dataset, rs []rangeRead) error {
	ops := make([]sdk.ReadOp, len(rs))
	for i, x := range rs {
		ops[i] = sdk.ReadOp{File: d.shards[x.shard], Off: x.off, N: x.n, Buf: r.buf, BufOff: x.dst}
	}
	return r.c.ReadBatch(ctx, ops)
}

// agentRegion is a local agent's Iov: the loader's batches land there,
// read by the agent through its rings, and the Iov is a memfd, so another
// process (a DataLoader's training process) can map the same batches.
// The shards are opened through the agent once, when the region is made.
type agentRegion struct {
	conn    *sdk.AgentConn
	files   []uint64      // the agent's numbers for the dataset's shards
	timeout time.Duration // bounds a call without a deadline: the client's OpTimeout

	// Submit is one producer at a time; one goroutine reaps and hands
	// each completion to the read that is waiting for it.
	submitMu sync.Mutex
	mu       sync.Mutex
	waiting  map[uint64]*ringRead // by the first entry's UserData
	next     uint64
	room     chan struct{} // closed and replaced when completions free ring space
	stop     chan struct{}
	done     chan struct{}
	err      error // set once the reaper has stopped
}

// ringRead is one read call's entries in flight.
type ringRead struct {
	entries []shmring.Entry
	left    int
	err     error
	done    chan struct{}
}

// agentDepth is the depth of a loader's rings: entries in flight at once.
const agentDepth = 1024

func newAgentRegion(socket string, size int, d *Dataset) (*agentRegion, error) {
	conn, err := sdk.DialAgent(socket, size, agentDepth, true)
	if err != nil {
		return nil, fmt.Errorf("local agent %s: %w", socket, err)
	}
	r := &agentRegion{conn: conn, timeout: d.c.OpTimeout(), waiting: map[uint64]*ringRead{}, room: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	if r.timeout <= 0 {
		r.timeout = readTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	for _, s := range d.m.Shards {
		f, n, err := conn.Open(ctx, path.Join(Dir(d.m.Name), s.File), false)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("open dataset %s through the local agent: %w", d.m.Name, err)
		}
		if n != s.Bytes {
			conn.Close()
			return nil, fmt.Errorf("open dataset %s through the local agent: shard %s has %d bytes, the manifest says %d", d.m.Name, s.File, n, s.Bytes)
		}
		r.files = append(r.files, f)
	}
	go r.reap()
	return r, nil
}

func (r *agentRegion) bytes() []byte { return r.conn.Iov.Bytes() }
func (r *agentRegion) fd() int       { return r.conn.Iov.Fd() }

// release ends the agent session: the agent closes the files and stops
// touching the Iov before the segment is unmapped.
func (r *agentRegion) release() error {
	close(r.stop)
	<-r.done
	return r.conn.Close()
}

func (r *agentRegion) read(ctx context.Context, d *Dataset, rs []rangeRead) error {
	if len(rs) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	rr := &ringRead{entries: make([]shmring.Entry, 0, len(rs)), done: make(chan struct{})}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return r.err
	}
	for _, x := range rs {
		for off, left := x.off, x.n; left > 0; { // an entry moves at most 4 GiB - 1
			n := min(left, 1<<31)
			r.next++
			rr.entries = append(rr.entries, shmring.Entry{Op: shmring.OpRead, File: r.files[x.shard], Offset: uint64(off),
				BufOff: uint64(x.dst + x.n - left), Length: uint32(n), UserData: r.next})
			r.waiting[r.next] = rr
			off += int64(n)
			left -= n
		}
	}
	rr.left = len(rr.entries)
	r.mu.Unlock()
	// Submit what fits; wait for completions to make room for the rest.
	for es := rr.entries; len(es) > 0; {
		r.mu.Lock()
		room := r.room
		r.mu.Unlock()
		r.submitMu.Lock()
		n := r.conn.Submit(es)
		r.submitMu.Unlock()
		es = es[n:]
		if n == 0 {
			select {
			case <-room:
			case <-r.done:
				return r.fail(rr, r.err)
			case <-ctx.Done():
				return r.fail(rr, ctx.Err())
			}
		}
	}
	select {
	case <-rr.done:
		return rr.err
	case <-r.done:
		return r.fail(rr, r.err)
	case <-ctx.Done():
		return r.fail(rr, ctx.Err())
	}
}

// fail forgets a read that is given up on. Entries of it may still be in
// flight: the caller quarantines its memory, which the agent may still
// fill until the session ends.
func (r *agentRegion) fail(rr *ringRead, err error) error {
	r.mu.Lock()
	for _, e := range rr.entries {
		delete(r.waiting, e.UserData)
	}
	r.mu.Unlock()
	return fmt.Errorf("read through the local agent: %w", err)
}

// reap hands completions to their reads until the region is released or
// the agent goes away. The bytes are not checked again here: the agent
// completes a read only once the bytes in this Iov were checked against
// the CRC storage derived from the chunk's block checksums — by the agent,
// or by a storage node in the agent's process as it copied them there —
// and read them again, on its own, if they came damaged; so the check is
// end to end already, and a second pass over every sample in the training
// process would only cost it CPU. The completion's CRC stays for applications of the
// rings that want to check for themselves.
func (r *agentRegion) reap() {
	defer close(r.done)
	cs := make([]shmring.Completion, agentDepth)
	for {
		select {
		case <-r.stop:
			r.stopped(errors.New("loader closed"))
			return
		default:
		}
		n := r.conn.Reap(cs, 100*time.Millisecond)
		if n == 0 {
			continue
		}
		r.mu.Lock()
		for _, c := range cs[:n] {
			rr := r.waiting[c.UserData]
			if rr == nil {
				continue // a read given up on
			}
			delete(r.waiting, c.UserData)
			e := rr.entries[c.UserData-rr.entries[0].UserData]
			if rr.err == nil { // the first failure of a read is the one it reports
				switch {
				case c.Status < 0:
					rr.err = fmt.Errorf("agent read of %d bytes at %d: %w", e.Length, e.Offset, unix.Errno(-c.Status))
				case c.Length != e.Length:
					rr.err = fmt.Errorf("agent read %d of %d bytes at %d", c.Length, e.Length, e.Offset)
				}
			}
			if rr.left--; rr.left == 0 {
				close(rr.done)
			}
		}
		close(r.room)
		r.room = make(chan struct{})
		r.mu.Unlock()
	}
}

// stopped fails every read still waiting.
func (r *agentRegion) stopped(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	for k, rr := range r.waiting {
		delete(r.waiting, k)
		if rr.err == nil {
			rr.err = err
		}
	}
}
