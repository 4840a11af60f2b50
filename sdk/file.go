package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/routing"
)

// piece is the part of a file range inside one chunk.
type piece struct {
	index    uint64 // chunk index
	chunkOff uint32 // offset in the chunk
	off      int    // offset in the caller's buffer
	n        int
}

// maxPiece bounds one chunk write: chunks larger than it travel in several
// pieces. A write piece covering its whole chunk replaces it.
const maxPiece = 4 << 20

// maxReadPiece bounds one chunk read of ReadAt. Its reads are cut finer
// than writes, at fixed offsets in the chunk (so pieces after the first are
// whole blocks): the pieces go to different replicas at once, and the
// per-byte work of one large read (the copy into the caller's memory, the
// check of its CRC) spreads over cores instead of queueing on one. Half a
// default chunk is the best cut on two cores (BenchmarkReadAt, 1 MiB:
// 0.72 x_pread in-process against 0.66 with 256 KiB and 0.56 uncut; over
// TCP 0.32-0.36 against 0.29-0.33): finer, the hand-offs cost more than
// the cores give. Batched reads (ReadBatch) have their parallelism already
// and keep whole chunks: cut finer, the loader's 1 MiB batches were 5-10%
// slower.
const maxReadPiece = 512 << 10

// maxPiecesInFlight bounds the chunk requests one ReadAt or WriteAt has in
// flight at once.
const maxPiecesInFlight = 16

// pieces cuts [off, off+n) at chunk boundaries and at every multiple of
// limit bytes into a chunk.
func (f *File) pieces(off int64, n, limit int) []piece {
	cs := int64(f.in.Layout.GetChunkSize())
	var out []piece
	for done := 0; done < n; {
		pos := off + int64(done)
		idx, in := pos/cs, pos%cs
		k := int(min(cs-in, int64(n-done), int64(limit)-in%int64(limit)))
		out = append(out, piece{index: uint64(idx), chunkOff: uint32(in), off: done, n: k})
		done += k
	}
	return out
}

func (f *File) chain(index uint64) routing.ChainID {
	return routing.ChainID(fsmeta.ChunkChain(f.chains, f.in.Layout, f.in.Ino, index))
}

// ChunkChain is the chain that holds the file's chunk index: its layout
// over the chain table as the file was opened (what an operator checking
// placement, or a test, compares a target's chunks against).
func (f *File) ChunkChain(index uint32) routing.ChainID { return f.chain(uint64(index)) }

func (f *File) chunk(index uint64) chunkio.ID {
	return chunkio.ID{Inode: f.in.Ino, Index: uint32(index)}
}

// eachPiece registers b with the data plane for the duration (access
// says what storage may do to it: pull written bytes, push read ones) and
// runs fn on every piece, several at once when there are several: the
// pieces of a range lie in different chunks, usually on different chains
// and nodes. It returns the offset in b of the first piece that failed,
// with its error, or len(b) and nil.
//
// Registering the caller's own buffer, rather than staging through a
// registered one, is what saves a copy of every byte: storage pulls the
// written bytes straight out of b and pushes read ones straight into it.
// A registration costs a map entry and a random key, and deregistering
// waits for any access still in progress, so no late push from an attempt
// given up can reach b after it is handed back.
func (f *File) eachPiece(b []byte, off int64, access fabric.Access, fn func(mr fabric.MR, pc piece) error) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	mr, err := f.c.ep.RegisterMemory(b, access)
	if err != nil {
		return 0, err
	}
	defer mr.Deregister()
	limit := maxPiece
	if access == fabric.AccessRemoteWrite { // storage pushes into b: a read
		limit = maxReadPiece
	}
	pcs := f.pieces(off, len(b), limit)
	if len(pcs) == 1 {
		if err := fn(mr, pcs[0]); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	errs := make([]error, len(pcs))
	sem := make(chan struct{}, maxPiecesInFlight)
	var wg sync.WaitGroup
	for i, pc := range pcs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(mr, pc)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return pcs[i].off, err
		}
	}
	return len(b), nil
}

// WriteAt writes p at off; the file's length as others see it is set when
// the file is closed. The chunks p spans are written concurrently; a small
// file's bytes stay in the handle until Sync or Close (inline.go).
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt cut short when ctx ends (Config.OpTimeout
// bounds it when ctx has no deadline).
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.CheckWrite(off, len(p)); err != nil {
		return 0, err
	}
	if done, err := f.writeSmall(ctx, p, off); err != nil || done {
		if err != nil {
			return 0, err
		}
		f.c.metrics.wrote(len(p), nil)
		return len(p), nil
	}
	if n, err := f.put(ctx, p, off); err != nil {
		return n, err
	}
	f.grow(uint64(off) + uint64(len(p)))
	return len(p), nil
}

// CheckWrite returns the error WriteAt would return at once for n bytes
// at off (not open for writing, a negative offset, past the largest
// length), for callers that take a write now and store it later.
func (f *File) CheckWrite(off int64, n int) error {
	if f.session == 0 {
		return fmt.Errorf("write %s: not open for writing", f.name)
	}
	if off < 0 {
		return fmt.Errorf("write %s: negative offset", f.name)
	}
	if off > f.maxSize()-int64(n) {
		return fmt.Errorf("write %s: [%d:+%d] past the largest file (%d bytes): %w", f.name, off, n, f.maxSize(), ErrTooLarge)
	}
	return nil
}

// reserve raises the file's written mark to at least end before bytes up
// to end are stored, so that the mark bounds what this handle stored even
// if its process dies before it closes (the leader then ends its session,
// and the collector removes the chunks below the mark once the file is
// unlinked). Room grows geometrically, to twice what is reserved in whole
// chunks: writing a file from start to end costs a logarithmic number of
// reservations, one command of the metadata log each, and its mark stays
// within twice its length. The first chunk needs none (see
// meta.Namespace.PruneClient).
func (f *File) reserve(ctx context.Context, end uint64) error {
	if end <= f.reservedTo() {
		return nil
	}
	f.reserving.Lock()
	defer f.reserving.Unlock()
	have := f.reservedTo()
	if end <= have {
		return nil // another write reserved it meanwhile
	}
	want := max(end, 2*have)
	if cs := uint64(f.in.GetLayout().GetChunkSize()); cs > 0 {
		want = (want + cs - 1) / cs * cs
	}
	want = max(end, min(want, uint64(f.maxSize())))
	cctx, done := f.c.call(ctx)
	defer done()
	_, err := f.c.meta.Close(cctx, &metapb.CloseRequest{Ino: f.in.Ino, Session: f.session, Written: &want, KeepOpen: true, Client: f.c.id, Seq: f.c.next()})
	if err != nil {
		return f.c.timedOut(cctx, fsErr("write", f.name, err))
	}
	f.mu.Lock()
	f.reserved = max(f.reserved, want)
	f.mu.Unlock()
	return nil
}

// reservedTo is how far the file's written mark is reserved.
func (f *File) reservedTo() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reserved
}

// put stores p at off in the file's chunks (the length is the caller's).
func (f *File) put(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.reserve(ctx, uint64(off)+uint64(len(p))); err != nil {
		return 0, err
	}
	ctx, done := f.c.call(ctx)
	defer done()
	n, err := f.eachPiece(p, off, fabric.AccessRemoteRead, func(mr fabric.MR, pc piece) error {
		// A piece that covers its whole chunk replaces it: storage then
		// need not read the old content to patch it.
		whole := pc.chunkOff == 0 && int64(pc.n) == int64(f.in.Layout.GetChunkSize())
		_, err := f.c.store.WriteRegistered(ctx, f.chain(pc.index), f.chunk(pc.index), pc.chunkOff, whole,
			mr, pc.off, p[pc.off:pc.off+pc.n])
		return err
	})
	if err != nil {
		err = f.c.timedOut(ctx, fmt.Errorf("write %s: %w", f.name, err))
		f.c.metrics.wrote(n, err)
		return n, err
	}
	f.c.metrics.wrote(len(p), nil)
	return len(p), nil
}

// ReadAt reads len(p) bytes at off; parts never written read as zeros. The
// chunks p spans are read concurrently, each pushed by storage straight
// into p.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt cut short when ctx ends (Config.OpTimeout
// bounds it when ctx has no deadline).
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", f.name)
	}
	if n, ok := f.readSmall(p, off); ok {
		f.c.metrics.read(n, nil)
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	size := f.Size()
	if off >= size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), size-off))
	ctx, done := f.c.call(ctx)
	defer done()
	n, err := f.eachPiece(p[:want], off, fabric.AccessRemoteWrite, func(mr fabric.MR, pc piece) error {
		got, _, err := f.c.store.ReadRegistered(ctx, f.chain(pc.index), f.chunk(pc.index), pc.chunkOff,
			mr, pc.off, p[pc.off:pc.off+pc.n], false)
		if err == nil {
			clear(p[pc.off+got : pc.off+pc.n]) // a hole, or a chunk shorter than the file
		}
		return err
	})
	if err != nil {
		err = f.c.timedOut(ctx, fmt.Errorf("read %s: %w", f.name, err))
		f.c.metrics.read(n, err)
		return n, err
	}
	f.c.metrics.read(want, nil)
	if want < len(p) {
		return want, io.EOF
	}
	return want, nil
}

// Close ends the handle; for a file open for writing it records the length.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.New("sluice: file already closed")
	}
	f.closed = true
	f.mu.Unlock()
	if f.session == 0 {
		f.c.leases.release(f.in.Ino)
		return nil
	}
	// Renewals stop with the last file open for writing, even if this
	// close fails: the leader then ends the session after a lease.
	defer f.c.writing.Add(-1)
	return f.c.closeSession(context.Background(), f, false)
}
