package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/routing"
)

// WriteOp is one range of a batched write: N bytes of Buf at BufOff into
// File (open for writing) at Off.
type WriteOp struct {
	File   *File
	Off    int64
	N      int
	Buf    *Buffer
	BufOff int
}

// writersPerNode bounds the chunk writes a batch keeps in flight to one
// chain head: enough to keep a node's disk and the wire busy, few enough
// that one batch does not take every staging buffer a node has.
const writersPerNode = 8

// WriteBatch writes every op, each chain's head pulling the bytes straight
// from the ops' buffers (no staging copy). Ops are cut at chunk boundaries
// and grouped by chunk: the pieces of one chunk are written in op order,
// one after another (so of two ops that overlap, the later one wins), and
// adjacent pieces that are contiguous in both the chunk and the buffer
// travel as one update; chunks are written in parallel, grouped by the
// node heading their chain. Each file's length grows to cover the ops that
// succeeded. It returns the first failure, naming its op.
func (c *Client) WriteBatch(ctx context.Context, ops []WriteOp) error {
	return firstOpError("write batch", c.writeOps(ctx, ops))
}

// firstOpError is the first non-nil error in errs, naming its op.
func firstOpError(what string, errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: op %d: %w", what, i, err)
		}
	}
	return nil
}

// chunkWrite is one update: bytes of one chunk, from one buffer, covering
// one or more ops (adjacent ones merged).
type chunkWrite struct {
	chain    routing.ChainID
	chunk    chunkio.ID
	chunkOff uint32
	buf      *Buffer
	bufOff   int
	n        int
	ops      []int
}

// writeOps is WriteBatch with one error per op.
func (c *Client) writeOps(ctx context.Context, ops []WriteOp) []error {
	errs := make([]error, len(ops))
	type chunkKey struct {
		ino   uint64
		index uint64
	}
	byChunk := map[chunkKey][]*chunkWrite{}
	var order []chunkKey // first appearance, so the run is deterministic
	fenced := map[*Buffer]bool{}
	ends := map[*File]uint64{} // how far each file is written: reserved first (File.reserve)
	for i, op := range ops {
		if errs[i] = checkWrite(op); errs[i] == nil {
			ends[op.File] = max(ends[op.File], uint64(op.Off)+uint64(op.N))
		}
	}
	for f, end := range ends {
		// Batched writes go to chunks: a small file's content goes first.
		err := f.toChunks(ctx)
		if err == nil {
			err = f.reserve(ctx, end)
		}
		if err != nil {
			for i, op := range ops {
				if op.File == f && errs[i] == nil {
					errs[i] = err
				}
			}
		}
	}
	for i, op := range ops {
		if errs[i] != nil {
			continue
		}
		if !fenced[op.Buf] {
			// The caller filled the buffer with plain stores; heads pull it
			// with no Go synchronization in between.
			op.Buf.mr.Fence()
			fenced[op.Buf] = true
		}
		f := op.File
		for _, pc := range f.pieces(op.Off, op.N, maxPiece) {
			k := chunkKey{f.in.Ino, pc.index}
			list := byChunk[k]
			if len(list) == 0 {
				order = append(order, k)
			}
			bufOff := op.BufOff + pc.off
			if last := lastOf(list); last != nil && last.buf == op.Buf && last.bufOff+last.n == bufOff &&
				int(last.chunkOff)+last.n == int(pc.chunkOff) && last.n+pc.n <= maxPiece {
				last.n += pc.n
				last.ops = append(last.ops, i)
				continue
			}
			byChunk[k] = append(list, &chunkWrite{chain: f.chain(pc.index), chunk: chunkio.ID{Inode: f.in.Ino, Index: uint32(pc.index)},
				chunkOff: pc.chunkOff, buf: op.Buf, bufOff: bufOff, n: pc.n, ops: []int{i}})
		}
	}

	// Group the chunks by their chain's head as routing says now; a chunk
	// whose head moves meanwhile is still written (chunkio.Client follows
	// the routing), just not in the group it was counted in.
	r := c.routing.Routing()
	byNode := map[fabric.NodeID][][]*chunkWrite{}
	for _, k := range order {
		list := byChunk[k]
		var node fabric.NodeID
		if ch, ok := r.Chains[list[0].chain]; ok && len(ch.Targets) > 0 {
			node = r.Targets[ch.Targets[0]].Node
		}
		byNode[node] = append(byNode[node], list)
	}
	var mu sync.Mutex // guards errs
	fail := func(w *chunkWrite, err error) {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range w.ops {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	ctx, done := c.call(ctx)
	defer done()
	var wg sync.WaitGroup
	for _, chunks := range byNode {
		next := make(chan []*chunkWrite, len(chunks))
		for _, list := range chunks {
			next <- list
		}
		close(next)
		for range min(writersPerNode, len(chunks)) {
			wg.Go(func() {
				for list := range next {
					for _, w := range list {
						_, err := c.store.WriteRegistered(ctx, w.chain, w.chunk, w.chunkOff, false, w.buf.mr, w.bufOff, w.buf.B[w.bufOff:w.bufOff+w.n])
						if err != nil {
							fail(w, c.timedOut(ctx, err))
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for i, op := range ops {
		if errs[i] == nil && op.N > 0 {
			op.File.grow(uint64(op.Off) + uint64(op.N))
		}
		c.metrics.wrote(op.N, errs[i])
	}
	return errs
}

// grow extends the length this handle knows, and the end of what it
// wrote, to cover end.
func (f *File) grow(end uint64) {
	f.mu.Lock()
	f.size = max(f.size, end)
	f.wrote = max(f.wrote, end)
	f.unpublished = true
	f.mu.Unlock()
}

func lastOf(list []*chunkWrite) *chunkWrite {
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// checkWrite says what is wrong with op, if anything.
func checkWrite(op WriteOp) error {
	switch {
	case op.File == nil || op.Buf == nil:
		return errors.New("a write needs a file and a buffer")
	case op.File.session == 0:
		return fmt.Errorf("write %s: %w", op.File.name, ErrNotWritable)
	case op.Off < 0 || op.N < 0:
		return fmt.Errorf("write %s: negative offset or length", op.File.name)
	case op.BufOff < 0 || op.BufOff > len(op.Buf.B) || op.N > len(op.Buf.B)-op.BufOff:
		return fmt.Errorf("write %s: range [%d:+%d] outside its buffer of %d bytes: %w", op.File.name, op.BufOff, op.N, len(op.Buf.B), ErrOutOfRange)
	case op.Off > op.File.maxSize()-int64(op.N):
		return fmt.Errorf("write %s: [%d:+%d] past the largest file (%d bytes): %w", op.File.name, op.Off, op.N, op.File.maxSize(), ErrTooLarge)
	}
	return nil
}

// checkRead says what is wrong with op, if anything.
func checkRead(op ReadOp) error {
	switch {
	case op.File == nil || op.Buf == nil:
		return errors.New("a read needs a file and a buffer")
	case op.Off < 0 || op.N < 0:
		return fmt.Errorf("read %s: negative offset or length", op.File.name)
	case op.BufOff < 0 || op.BufOff > len(op.Buf.B) || op.N > len(op.Buf.B)-op.BufOff:
		return fmt.Errorf("read %s: range [%d:+%d] outside its buffer of %d bytes: %w", op.File.name, op.BufOff, op.N, len(op.Buf.B), ErrOutOfRange)
	}
	return nil
}

// maxSize is the largest length the file may have: fsmeta.MaxFileSize,
// or less where its layout's chunks are too small for 32-bit chunk
// indexes to reach that far.
func (f *File) maxSize() int64 {
	return min(int64(f.in.Layout.GetChunkSize())<<32, fsmeta.MaxFileSize)
}

// ReadOp is one range of a batched read: N bytes of File at Off into Buf at
// BufOff.
type ReadOp struct {
	File   *File
	Off    int64
	N      int
	Buf    *Buffer
	BufOff int
}

// ReadBatch reads every op, grouped into one call per storage node, each
// node pushing straight into the ops' buffers (no copy). Ranges past a
// file's end are cut short; holes read as zeros. A range the batch could
// not read (its node failed or was unreachable, routing moved on, a chunk
// was rewritten while it was sent, the bytes arrived damaged) is read again
// on its own through the retrying path, so a failover does not fail the
// batch. An op that is wrong in itself (no file or buffer, a negative
// offset or length, a range outside its buffer: ErrOutOfRange) fails the
// batch before anything is read; otherwise it returns the first failure
// that remains, naming its op.
func (c *Client) ReadBatch(ctx context.Context, ops []ReadOp) error {
	for i, op := range ops {
		if err := checkRead(op); err != nil {
			return fmt.Errorf("read batch: op %d: %w", i, err)
		}
	}
	for i, r := range c.readOps(ctx, ops, false) {
		if r.Err != nil {
			return fmt.Errorf("read batch: op %d: %w", i, r.Err)
		}
	}
	return nil
}

// readResult is what readOps says about one op.
type readResult struct {
	N   int    // bytes of the file read (short at its end)
	CRC uint32 // with sums: CRC32C of those N bytes as they lie in the buffer
	Err error
}

// readOps is the batched read, ReadBatch's and the agent's, with one
// result per op (the agent completes its entries one by one). It sends one
// call per storage node and each node pushes straight into the buffers; a
// piece the batch could not read (a node died, routing moved, the bytes
// arrived damaged) is read again on its own through the retrying path, so
// one bad node does not fail the batch. An op checkRead refuses fails
// alone, with nothing read for it. With sums, each op's result carries the
// CRC32C of its bytes (the agent's completions do; ReadBatch's callers
// have no use for it and skip the pass over the bytes).
func (c *Client) readOps(ctx context.Context, ops []ReadOp, sums bool) []readResult {
	res := make([]readResult, len(ops))
	// One piece per op is the common case: room for that, so the slices
	// are allocated once, not grown entry by entry.
	reads := make([]chunkio.BatchRead, 0, len(ops))
	owner := make([]int, 0, len(ops)) // op of each read
	for i, op := range ops {
		if res[i].Err = checkRead(op); res[i].Err != nil {
			continue
		}
		if n, ok := op.File.readSmall(op.Buf.B[op.BufOff:op.BufOff+op.N], op.Off); ok {
			res[i].N = n // its sum, when asked for, is taken below
			continue
		}
		res[i].N = int(min(int64(op.N), max(0, op.File.Size()-op.Off)))
		for _, pc := range op.File.pieces(op.Off, res[i].N, maxPiece) {
			reads = append(reads, chunkio.BatchRead{Chain: op.File.chain(pc.index),
				Chunk: chunkio.ID{Inode: op.File.in.Ino, Index: uint32(pc.index)}, Offset: pc.chunkOff,
				Dst: op.Buf.mr.Remote(op.BufOff+pc.off, pc.n), N: -1}) // N stays -1 if its node never answered
			owner = append(owner, i)
		}
	}
	var summed []bool // ops whose CRC is their one piece's, checked below
	if sums {
		summed = make([]bool, len(ops))
	}
	if len(reads) == 0 {
		return c.readDone(ops, res, summed)
	}
	ctx, done := c.call(ctx)
	defer done()
	// Per-node failures show as reads left with N -1; the batch's own
	// error adds nothing to them.
	_ = c.store.ReadBatch(ctx, reads)
	var fenced *Buffer
	for k := range reads {
		rd, op := &reads[k], ops[owner[k]]
		if res[owner[k]].Err != nil { // an earlier piece of the op failed
			continue
		}
		if op.Buf != fenced { // every push into it is done: once per buffer (run)
			op.Buf.mr.Fence()
			fenced = op.Buf
		}
		off := int(rd.Dst.Offset)
		dst := op.Buf.B[off : off+int(rd.Dst.Len)]
		checked := true // dst holds rd.N bytes whose CRC is rd.CRC
		if rd.Err != nil || rd.N < 0 || rd.N > len(dst) || !rd.Checked && chunkio.CRC(dst[:rd.N]) != rd.CRC {
			checked = false
			var err error
			rd.N, _, err = c.store.ReadRegistered(ctx, rd.Chain, rd.Chunk, rd.Offset, op.Buf.mr, off, dst, false)
			if err != nil {
				res[owner[k]].Err = c.timedOut(ctx, fmt.Errorf("read %s: %w", op.File.name, err))
				continue
			}
		}
		clear(dst[rd.N:]) // holes read as zeros
		if sums && checked && rd.N == res[owner[k]].N && (k+1 == len(reads) || owner[k+1] != owner[k]) && (k == 0 || owner[k-1] != owner[k]) {
			// The op is this one piece, whose bytes were just checked
			// against rd.CRC: that is the op's sum, with no second pass.
			res[owner[k]].CRC, summed[owner[k]] = rd.CRC, true
		}
	}
	return c.readDone(ops, res, summed)
}

// readDone counts readOps' results and, when summed is not nil (sums
// asked for), sums each op's bytes that summed says were not.
func (c *Client) readDone(ops []ReadOp, res []readResult, summed []bool) []readResult {
	for _, r := range res {
		c.metrics.read(r.N, r.Err)
	}
	if summed != nil {
		for i, op := range ops {
			if res[i].Err == nil && !summed[i] {
				res[i].CRC = chunkio.CRC(op.Buf.B[op.BufOff : op.BufOff+res[i].N])
			}
		}
	}
	return res
}
