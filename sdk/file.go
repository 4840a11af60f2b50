package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/storage"
)

// piece is the part of a file range inside one chunk.
type piece struct {
	index    uint64 // chunk index
	chunkOff uint32 // offset in the chunk
	off      int    // offset in the caller's buffer
	n        int
}

// maxPiece is the staging buffers' size: chunks larger than it travel in
// several pieces.
const maxPiece = 4 << 20

// pieces cuts [off, off+n) at chunk boundaries (and every maxPiece bytes).
func (f *File) pieces(off int64, n int) []piece {
	cs := int64(f.in.Layout.GetChunkSize())
	var out []piece
	for done := 0; done < n; {
		pos := off + int64(done)
		idx, in := pos/cs, pos%cs
		k := int(min(cs-in, int64(n-done), maxPiece)) // a piece fits a staging buffer
		out = append(out, piece{index: uint64(idx), chunkOff: uint32(in), off: done, n: k})
		done += k
	}
	return out
}

func (f *File) chain(index uint64) storage.ChainID {
	return storage.ChainID(meta.ChunkChain(f.chains, f.in.Layout, f.in.Ino, index))
}

// WriteAt writes p at off; the file's length as others see it is set when
// the file is closed.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if f.session == 0 {
		return 0, fmt.Errorf("write %s: not open for writing", f.name)
	}
	if off < 0 {
		return 0, fmt.Errorf("write %s: negative offset", f.name)
	}
	if n, err := f.put(context.Background(), p, off); err != nil {
		return n, err
	}
	f.mu.Lock()
	f.size = max(f.size, uint64(off)+uint64(len(p)))
	f.mu.Unlock()
	return len(p), nil
}

// put stores p at off in the file's chunks (the length is the caller's).
func (f *File) put(ctx context.Context, p []byte, off int64) (int, error) {
	ctx, done := f.c.call(ctx)
	defer done()
	for _, pc := range f.pieces(off, len(p)) {
		buf := <-f.c.buffers
		copy(buf.b, p[pc.off:pc.off+pc.n])
		_, err := f.c.store.WriteRegistered(ctx, f.chain(pc.index), storage.ChunkID{Inode: f.in.Ino, Index: uint32(pc.index)},
			pc.chunkOff, false, buf.mr, 0, buf.b[:pc.n])
		f.c.buffers <- buf
		if err != nil {
			return pc.off, fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return len(p), nil
}

// ReadAt reads len(p) bytes at off; parts never written read as zeros.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", f.name)
	}
	size := f.Size()
	if off >= size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), size-off))
	ctx, done := f.c.call(context.Background())
	defer done()
	for _, pc := range f.pieces(off, want) {
		buf := <-f.c.buffers
		got, _, err := f.c.store.ReadRegistered(ctx, f.chain(pc.index), storage.ChunkID{Inode: f.in.Ino, Index: uint32(pc.index)},
			pc.chunkOff, buf.mr, 0, buf.b[:pc.n], false)
		if err == nil {
			copy(p[pc.off:], buf.b[:got])
			clear(p[pc.off+got : pc.off+pc.n]) // a hole, or a chunk shorter than the file
		}
		f.c.buffers <- buf
		if err != nil {
			return pc.off, fmt.Errorf("read %s: %w", f.name, err)
		}
	}
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
	size := f.size
	f.mu.Unlock()
	if f.session == 0 {
		return nil
	}
	return f.c.closeSession(context.Background(), f, size, false)
}
