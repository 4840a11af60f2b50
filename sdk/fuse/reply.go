package fuse

import (
	"io"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// reply is the answer to one read, written to the kernel without copying
// what the mount already holds: its pieces, in order, are parts of the
// request's own buffer (read there from the file) and views of readahead
// windows and cached blocks, which stay pinned until the kernel has the
// reply (go-fuse writes the pieces with one writev, then calls Done).
type reply struct {
	ra     *readahead
	pieces [][]byte
	n      int
	wins   []*window // pinned windows
	blocks []*cached // pinned cached blocks
}

// add appends a piece.
func (r *reply) add(b []byte) {
	r.pieces = append(r.pieces, b)
	r.n += len(b)
}

// direct reads p at off from the file into p and adds it, the bytes past
// the file's end left alone.
func (r *reply) direct(p []byte, off int64) error {
	if _, err := r.ra.f.ReadAt(p, off); err != nil && err != io.EOF {
		return err
	}
	r.add(p)
	return nil
}

// unlessFailed is r, nil; or, for an error, r with nothing pinned, and err.
func (r *reply) unlessFailed(err error) (*reply, error) {
	if err != nil {
		r.Done()
		r.pieces, r.n = nil, 0
	}
	return r, err
}

// copyTo copies the reply into p (pieces already there stay), returning
// its length.
func (r *reply) copyTo(p []byte) int {
	at := 0
	for _, b := range r.pieces {
		if len(b) > 0 && &p[at] != &b[0] {
			copy(p[at:], b)
		}
		at += len(b)
	}
	return r.n
}

// Slices is go-fuse's way to write the pieces as they are.
func (r *reply) Slices() ([][]byte, gofuse.Status) { return r.pieces, gofuse.OK }

// Bytes is the reply copied into buf, for go-fuse's other ways of writing
// (which may call Done before they write).
func (r *reply) Bytes(buf []byte) ([]byte, gofuse.Status) {
	return buf[:r.copyTo(buf)], gofuse.OK
}

func (r *reply) Size() int { return r.n }

// Done lets the windows and blocks go. Called once, by go-fuse or by the
// mount when the reply is not written.
func (r *reply) Done() {
	if len(r.wins) > 0 {
		r.ra.mu.Lock()
		for _, w := range r.wins {
			w.pins--
		}
		r.ra.mu.Unlock()
		r.ra.unpinned.Broadcast()
		r.wins = nil
	}
	for _, b := range r.blocks {
		r.ra.cache.unpin(b)
	}
	r.blocks = nil
}

var _ gofuse.ReadResult = (*reply)(nil)
