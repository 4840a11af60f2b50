package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Small files live in the metadata service (server/meta inline.go): a
// file of at most the service's inline limit is written by the close that
// ends its writer's session, bytes and length in one command of the
// metadata log, with nothing on storage; its readers get the bytes with
// the open. A handle keeps such a file's whole content in memory (small):
// a handle that opens an inline file, or opens an empty one for writing
// while the service keeps small files. Its writes land in that memory
// while the content stays within the limit, and Close or Sync hands the
// content over. A write that outgrows the limit, a batched write, a hole
// punched, or a close the service refuses (another writer has the file
// open) moves the handle to chunks for good (spill): it stores the bytes
// at the start of the file's chunks, and its next close, with a written
// mark, ends the inline content.

// smallState is a handle's small-file state; mu guards it, and is held
// across a spill so that no write or read sees the content half moved.
type smallState struct {
	on    bool   // the content is data, then zeros up to the handle's size
	data  []byte // the content's bytes (at most the handle's size)
	dirty bool   // changed through this handle since the last hand-over
	limit int    // the service's inline limit as of the open
	// garbage is the file's written mark as of the open: chunks below it
	// may hold bytes of a writer that died while spilling, which a spill
	// removes before it stores.
	garbage uint64
}

// openSmall sets up the small-file state of a handle that r opened.
func (f *File) openSmall(r *metapb.OpenReply, write bool) {
	f.small.limit = int(r.InlineMax)
	switch {
	case r.Inode.Inline > 0:
		f.small.on, f.small.data = true, r.Data
	case write && r.Session != 0 && r.Inode.Size == 0 && r.InlineMax > 0:
		f.small.on = true
	default:
		return
	}
	f.small.garbage = writtenMark(r.Inode)
	f.isSmall.Store(true)
}

// lockSmall takes smallMu and reports whether the handle is small; when
// it is not, the lock is not held.
func (f *File) lockSmall() bool {
	if !f.isSmall.Load() {
		return false
	}
	f.smallMu.Lock()
	if !f.small.on {
		f.smallMu.Unlock()
		return false
	}
	return true
}

// readSmall reads [off, off+len(p)) of a small handle's content into p,
// as ReadAt does, cut at the handle's size; ok is false once the handle
// has spilled (the caller reads chunks).
func (f *File) readSmall(p []byte, off int64) (n int, ok bool) {
	if !f.lockSmall() {
		return 0, false
	}
	defer f.smallMu.Unlock()
	size := f.Size()
	if off >= size {
		return 0, true
	}
	n = int(min(int64(len(p)), size-off))
	got := 0
	if off < int64(len(f.small.data)) {
		got = copy(p[:n], f.small.data[off:])
	}
	clear(p[got:n])
	return n, true
}

// writeSmall takes a write into a small handle's content when it stays
// within the limit (done), or spills the handle so that the caller writes
// chunks (not done).
func (f *File) writeSmall(ctx context.Context, p []byte, off int64) (done bool, err error) {
	if !f.lockSmall() {
		return false, nil
	}
	defer f.smallMu.Unlock()
	end := off + int64(len(p))
	if end > int64(f.small.limit) {
		return false, f.spill(ctx)
	}
	if int64(len(f.small.data)) < end {
		f.small.data = append(f.small.data, make([]byte, end-int64(len(f.small.data)))...)
	}
	copy(f.small.data[off:], p)
	f.small.dirty = true
	f.mu.Lock()
	f.size = max(f.size, uint64(end))
	f.unpublished = true
	f.mu.Unlock()
	return true, nil
}

// truncateSmall cuts a small handle's content to size; false when the
// handle is not small.
func (f *File) truncateSmall(size uint64) bool {
	if !f.lockSmall() {
		return false
	}
	defer f.smallMu.Unlock()
	if uint64(len(f.small.data)) > size {
		f.small.data = f.small.data[:size]
	}
	f.small.dirty = true
	return true
}

// toChunks spills a small handle, if it is one, so that what follows
// works on chunks (a batched write, a hole punched).
func (f *File) toChunks(ctx context.Context) error {
	if !f.lockSmall() {
		return nil
	}
	defer f.smallMu.Unlock()
	return f.spill(ctx)
}

// spill moves a small handle's content to the file's chunks: what a dead
// spiller may have left below the written mark removed, then the bytes
// stored from the start. The handle then works on chunks; its next close
// or sync (with a written mark) ends the inline content at the service.
// The caller holds smallMu.
func (f *File) spill(ctx context.Context) error {
	if f.session == 0 {
		return fmt.Errorf("write %s: its content is kept inline and this handle is not open for writing: %w", f.name, ErrNotWritable)
	}
	if cs := uint64(f.in.GetLayout().GetChunkSize()); f.small.garbage > 0 && cs > 0 {
		if err := f.removeChunks(ctx, 0, (f.small.garbage+cs-1)/cs); err != nil {
			return fmt.Errorf("write %s: move its content to chunks: %w", f.name, err)
		}
		f.small.garbage = 0
	}
	if len(f.small.data) > 0 {
		if _, err := f.put(ctx, f.small.data, 0); err != nil {
			return fmt.Errorf("write %s: move its content to chunks: %w", f.name, err)
		}
		f.grow(uint64(len(f.small.data)))
	} else {
		// Nothing to store, but the close must still end any inline
		// content: a written mark says the bytes are in chunks.
		f.mu.Lock()
		f.wrote = max(f.wrote, 1)
		f.unpublished = true
		f.mu.Unlock()
	}
	f.small = smallState{}
	f.isSmall.Store(false)
	return nil
}

// errInChunks: the handle's content is in chunks; close as usual.
var errInChunks = errors.New("content in chunks")

// handOver gives the metadata service a small handle's content, with its
// length, ending the session unless keep: errInChunks when the handle has
// nothing to hand over (it is not small, or changed nothing) or the
// service refused and the handle spilled.
func (f *File) handOver(ctx context.Context, keep bool) error {
	if !f.lockSmall() {
		return errInChunks
	}
	defer f.smallMu.Unlock()
	if !f.small.dirty || f.session == 0 {
		return errInChunks
	}
	size := uint64(f.Size())
	cctx, done := f.c.call(ctx)
	defer done()
	ended := f.c.takeEnds()
	_, err := f.c.meta.Close(cctx, &metapb.CloseRequest{Ino: f.in.Ino, Session: f.session, Size: &size, KeepOpen: keep,
		Inline: true, Data: f.small.data, Client: f.c.id, Seq: f.c.next(), Ended: ended})
	if err != nil {
		f.c.endAgain(ended) // a refusal before the log, or a failure: ending twice is harmless
	}
	if err == nil {
		f.small.dirty = false
		f.mu.Lock()
		f.unpublished = false // no chunk writes while small: size is all there is
		f.mu.Unlock()
		return nil
	}
	err = fsErr("close", f.name, err)
	if !errors.Is(err, fsmeta.ErrNotInline) {
		return f.c.timedOut(cctx, err)
	}
	if err := f.spill(ctx); err != nil {
		return err
	}
	return errInChunks
}

// Inline reports whether the handle holds the file's whole content (the
// file's bytes are kept by the metadata service, or, for a writer, will be
// at its close unless it outgrows the limit).
func (f *File) Inline() bool { return f.isSmall.Load() }
