package chunkstore

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/klauspost/compress/s2"

	"github.com/sluicefs/sluice/proto/storagepb"
)

// content returns all of version v's bytes, checked (nil v: none).
func (e *Engine) content(id chunkio.ID, v *storagepb.Version) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	buf := make([]byte, v.Length)
	if _, err := e.readVersion(id, v, 0, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Read reads the committed content at off into dst and returns how many
// bytes there were (fewer than len(dst) at the end of the chunk) and the
// version read. A chunk never committed is ErrNotFound.
func (e *Engine) Read(id chunkio.ID, off uint32, dst []byte) (int, *storagepb.Version, error) {
	return e.ReadVersion(id, 0, off, dst)
}

// ReadVersion is Read of version ver (committed or pending; 0: committed).
func (e *Engine) ReadVersion(id chunkio.ID, ver uint64, off uint32, dst []byte) (int, *storagepb.Version, error) {
	var n int
	v, err := e.withVersion(id, ver, func(v *storagepb.Version) (err error) {
		n, err = e.readVersion(id, v, off, dst)
		return err
	})
	return n, v, err
}

// View is ReadVersion without the copy: it returns up to n bytes of version
// ver at off (fewer at the chunk's end) as a read-only view of the chunk's
// file in the page cache. A range of whole blocks is not checked here: its
// CRC (RangeCRC) comes from the record's block checksums, so the reader's
// check of the bytes it received checks the blocks, end to end. Any other
// range has every block it touches checked, as ReadVersion does. ok is false, and
// nothing returned, when the version cannot be viewed (it is compressed, or
// the FS maps no files): use ReadVersion then.
//
// The view holds no lock, so writers never wait for a reader (whose next
// step may be a network send to a slow peer). Instead the caller must call
// done once it has finished with the bytes (sent them); done reports
// whether they stayed intact. If not, a newer version was written into the
// file meanwhile and the caller must not vouch for what it sent (report
// ErrNotCommitted: a retry finds the new version). That takes two commits
// of the chunk during one send, since a write goes to the file that does
// not hold the committed version.
//
// Serving reads from views is what takes a copy of every byte off a
// storage node's read path: the node checks the blocks in place and pushes
// straight from the page cache to the socket (or, on RDMA, the NIC).
func (e *Engine) View(id chunkio.ID, ver uint64, off uint32, n int) (view []byte, v *storagepb.Version, done func() (intact bool), ok bool, err error) {
	v, err = e.withVersion(id, ver, func(v *storagepb.Version) (err error) {
		view, done, err = e.viewVersion(id, v, off, n)
		return err
	})
	if errors.Is(err, errNoView) {
		return nil, nil, nil, false, nil
	}
	if err != nil {
		return nil, v, nil, true, err
	}
	return view, v, done, true, nil
}

// withVersion runs fn on version ver of the chunk (0: the committed one),
// again with the chunk's new record if a newer version took the version's
// slot between the lookup and fn's lock (errMoved).
func (e *Engine) withVersion(id chunkio.ID, ver uint64, fn func(*storagepb.Version) error) (*storagepb.Version, error) {
	for attempt := 0; ; attempt++ {
		m, err := e.Meta(id)
		if err != nil {
			return nil, err
		}
		v := m.GetCommitted()
		if ver != 0 && v.GetVer() != ver {
			v = m.GetPending()
			if v.GetVer() != ver {
				return nil, fmt.Errorf("chunk %v version %d: %w", id, ver, chunkio.ErrVersion)
			}
		}
		if v == nil {
			return nil, fmt.Errorf("chunk %v: %w", id, chunkio.ErrNotFound)
		}
		err = fn(v)
		if errors.Is(err, errMoved) && attempt < 8 {
			continue
		}
		return v, err
	}
}

// openVersion holds v's slot against rewrites and returns its open file,
// once it has checked that the slot still holds v (a newer version may have
// been written into it between the caller's lookup and the lock: errMoved).
// done releases both.
func (e *Engine) openVersion(id chunkio.ID, v *storagepb.Version) (cf *cachedFile, done func(), err error) {
	l := e.slotLock(id, v.Slot)
	l.RLock()
	m, err := e.Meta(id)
	if err == nil && !holds(m.GetCommitted(), v) && !holds(m.GetPending(), v) {
		err = errMoved
	}
	if err == nil {
		cf, err = e.files.get(fileKey{id, v.Slot}, func() (File, error) { return e.fs.Open(join(e.chunks, fileName(id, v.Slot))) })
		if err != nil {
			err = diskError(id, err)
		}
	}
	if err != nil {
		l.RUnlock()
		return nil, nil, err
	}
	return cf, func() { e.files.put(cf); l.RUnlock() }, nil
}

// errNoView: the version cannot be read in place.
var errNoView = errors.New("chunk version cannot be viewed")

// viewVersion is View of version v.
func (e *Engine) viewVersion(id chunkio.ID, v *storagepb.Version, off uint32, n int) ([]byte, func() bool, error) {
	if v.Compressed {
		return nil, nil, errNoView
	}
	if off >= v.Length {
		return nil, func() bool { return true }, nil
	}
	n = min(n, int(v.Length-off))
	cf, done, err := e.openVersion(id, v)
	if err != nil {
		return nil, nil, err
	}
	// Read under the slot's lock: the generation, then the blocks' check.
	gen := &e.slotGens[slotIndex(id, v.Slot)]
	before := gen.Load()
	view, err := cf.view(e.cfg.MaxChunkSize)
	if err == nil && view == nil {
		err = errNoView
	}
	if err == nil {
		// A file shorter than its record (a lost write) must not be
		// touched past its end: that is a fault, not an error.
		var size int64
		if size, err = cf.fileSize(); err == nil && size < int64(v.Stored) {
			err = fmt.Errorf("chunk %v version %d: %w: file shorter than recorded", id, v.Ver, chunkio.ErrChecksum)
		}
	}
	if err == nil && !blockAligned(v, off, uint32(n)) {
		// Whole blocks need no check here: their CRC for the reader comes
		// from the record, not from these bytes, so the reader's check of
		// what it received is the blocks' check, end to end (see the
		// package doc). That saves a pass over every byte from memory,
		// which cost as much as the page-cache copy it replaced.
		first := off / blockSize * blockSize
		last := min(v.Length, (off+uint32(n)+blockSize-1)/blockSize*blockSize)
		err = checkMapped(id, v, view[first:last], first, last)
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	// Keep the file (and its mapping) open until the caller is done, but
	// let writers in: the generation tells whether one came.
	e.slotLock(id, v.Slot).RUnlock()
	intact := func() bool {
		ok := gen.Load() == before
		e.files.put(cf)
		return ok
	}
	return view[off : off+uint32(n) : off+uint32(n)], intact, nil
}

// checkMapped is checkBlocks over mapped file bytes, where a file cut
// short under us (by something other than the engine, which holds the
// slot) raises a fault instead of a short read: that is reported as
// ErrChecksum rather than crashing the node.
func checkMapped(id chunkio.ID, v *storagepb.Version, buf []byte, from, to uint32) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			re, ok := r.(runtime.Error)
			if !ok || !strings.Contains(re.Error(), "fault") {
				panic(r)
			}
			err = fmt.Errorf("chunk %v version %d: %w: %v", id, v.Ver, chunkio.ErrChecksum, re)
		}
	}()
	return checkBlocks(id, v, buf, from, to)
}

// readVersion reads version v's bytes at off into dst, checking every block
// it touches; a mismatch is ErrChecksum, never data.
func (e *Engine) readVersion(id chunkio.ID, v *storagepb.Version, off uint32, dst []byte) (int, error) {
	if off >= v.Length {
		return 0, nil
	}
	n := min(len(dst), int(v.Length-off))
	cf, done, err := e.openVersion(id, v)
	if err != nil {
		return 0, err
	}
	defer done()
	f := cf.f
	if v.Compressed {
		enc := make([]byte, v.Stored)
		if _, err := f.ReadAt(enc, 0); err != nil {
			return 0, readError(id, v, err)
		}
		all, err := s2.Decode(nil, enc)
		if err != nil || len(all) != int(v.Length) {
			return 0, fmt.Errorf("chunk %v version %d: %w: undecodable", id, v.Ver, chunkio.ErrChecksum)
		}
		if err := checkBlocks(id, v, all, 0, v.Length); err != nil {
			return 0, err
		}
		return copy(dst[:n], all[off:]), nil
	}
	// Read whole blocks so each can be checked; straight into dst when the
	// range is block-aligned.
	first := off / blockSize * blockSize
	last := min(v.Length, (off+uint32(n)+blockSize-1)/blockSize*blockSize)
	buf := dst[:n]
	if first != off || last != off+uint32(n) {
		buf = make([]byte, last-first)
	}
	if _, err := f.ReadAt(buf, int64(first)); err != nil {
		return 0, readError(id, v, err)
	}
	if err := checkBlocks(id, v, buf, first, last); err != nil {
		return 0, err
	}
	if first != off || last != off+uint32(n) {
		copy(dst[:n], buf[off-first:])
	}
	return n, nil
}

// errMoved: the version read was replaced in its slot; look it up again.
var errMoved = errors.New("chunk version moved")

func holds(have, want *storagepb.Version) bool {
	return have != nil && have.Ver == want.Ver && have.Slot == want.Slot && have.Crc == want.Crc
}

// readError reports a failed read; a file shorter than its record says is
// torn data, not an I/O error.
func readError(id chunkio.ID, v *storagepb.Version, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("chunk %v version %d: %w: file shorter than recorded", id, v.Ver, chunkio.ErrChecksum)
	}
	return diskError(id, err)
}

// RangeCRC is the CRC32C of data, the n bytes of version v at off that a
// read returned. For block-aligned ranges (and ranges that end the chunk)
// it is combined from the blocks' checksums without touching the bytes, so
// a server can hand the client an end-to-end checksum for free.
func RangeCRC(v *storagepb.Version, off uint32, data []byte) uint32 {
	end := off + uint32(len(data))
	if !blockAligned(v, off, uint32(len(data))) {
		return chunkio.CRC(data)
	}
	crc := uint32(0)
	for b := off; b < end; b += blockSize {
		crc = crcCombine(crc, v.BlockCrcs[b/blockSize], int(min(blockSize, end-b)))
	}
	return crc
}

// blockAligned reports whether n bytes of v at off are whole blocks (the
// last may end the chunk), so that RangeCRC derives their CRC from the
// record's block checksums, not from the bytes.
func blockAligned(v *storagepb.Version, off, n uint32) bool {
	end := off + n
	return off%blockSize == 0 && (end%blockSize == 0 || end == v.Length) && int(end/blockSize) <= len(v.BlockCrcs)+1
}

// checkBlocks verifies the blocks of v held in buf, which covers [from, to).
func checkBlocks(id chunkio.ID, v *storagepb.Version, buf []byte, from, to uint32) error {
	for b := from; b < to; b += blockSize {
		i := b / blockSize
		end := min(b+blockSize, to)
		if int(i) >= len(v.BlockCrcs) || chunkio.CRC(buf[b-from:end-from]) != v.BlockCrcs[i] {
			return fmt.Errorf("chunk %v version %d block %d: %w", id, v.Ver, i, chunkio.ErrChecksum)
		}
	}
	return nil
}
