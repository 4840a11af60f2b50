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
// file in the page cache, and their CRC32C. The bytes are not checked here:
// their CRC is derived from the record's block checksums (spanCRC), so the
// reader's check of the bytes it received checks every block the range
// touches, end to end, and a damaged block surfaces as ErrChecksum at the
// reader. ok is false, and nothing returned, when the version cannot be
// viewed (it is compressed, or the FS maps no files): use ReadVersion then.
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
// storage node's read path: the node pushes straight from the page cache
// to the socket (or, on RDMA, the NIC), and of a range's bytes it reads
// only those of its first and last blocks that lie outside it.
func (e *Engine) View(id chunkio.ID, ver uint64, off uint32, n int) (view []byte, v *storagepb.Version, crc uint32, done func() (intact bool), ok bool, err error) {
	v, err = e.withVersion(id, ver, func(v *storagepb.Version) (err error) {
		view, crc, done, err = e.viewVersion(id, v, off, n)
		return err
	})
	if errors.Is(err, errNoView) {
		return nil, nil, 0, nil, false, nil
	}
	if err != nil {
		return nil, v, 0, nil, true, err
	}
	return view, v, crc, done, true, nil
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
func (e *Engine) viewVersion(id chunkio.ID, v *storagepb.Version, off uint32, n int) ([]byte, uint32, func() bool, error) {
	if v.Compressed {
		return nil, 0, nil, errNoView
	}
	if off >= v.Length {
		return nil, 0, func() bool { return true }, nil
	}
	n = min(n, int(v.Length-off))
	cf, done, err := e.openVersion(id, v)
	if err != nil {
		return nil, 0, nil, err
	}
	// Read under the slot's lock: the generation, then the CRC.
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
	var crc uint32
	if err == nil {
		crc, err = mappedSpanCRC(id, v, view, off, off+uint32(n))
	}
	if err != nil {
		done()
		return nil, 0, nil, err
	}
	// Keep the file (and its mapping) open until the caller is done, but
	// let writers in: the generation tells whether one came.
	e.slotLock(id, v.Slot).RUnlock()
	intact := func() bool {
		ok := gen.Load() == before
		e.files.put(cf)
		return ok
	}
	return view[off : off+uint32(n) : off+uint32(n)], crc, intact, nil
}

// mappedSpanCRC is spanCRC over a file's mapping, where a page the file
// no longer backs faults: that is reported as ErrChecksum, not a crash.
func mappedSpanCRC(id chunkio.ID, v *storagepb.Version, view []byte, off, end uint32) (crc uint32, err error) {
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
	crc, err = spanCRC(v, view, off, end)
	if err != nil {
		err = fmt.Errorf("chunk %v: %w", id, err)
	}
	return crc, err
}

// spanCRC is the CRC32C of content[off:end], a range of version v, derived
// from the record's block checksums. Of the range's own bytes it reads
// none, only those of its first and last blocks that lie outside it. A
// reader that checks the bytes it received against it has therefore
// checked every block the range touches, end to end: damage inside the
// range fails that check, and so does damage in the rest of those two
// blocks (the derived CRC is then wrong), as a check of the whole blocks
// here would. content holds the version's bytes from offset 0, through the
// range's last block; nil will do for a range of whole blocks.
func spanCRC(v *storagepb.Version, content []byte, off, end uint32) (uint32, error) {
	if off >= end {
		return 0, nil
	}
	if last := (end - 1) / blockSize; int(last) >= len(v.BlockCrcs) || end > v.Length {
		return 0, fmt.Errorf("version %d: %d block checksums for %d bytes, read to %d: %w", v.Ver, len(v.BlockCrcs), v.Length, end, chunkio.ErrChecksum)
	}
	crc := uint32(0)
	for from := off / blockSize * blockSize; from < end; from += blockSize {
		to := min(from+blockSize, v.Length) // the block, whose CRC the record has
		lo, hi := max(from, off), min(to, end)
		part := v.BlockCrcs[from/blockSize] // becomes the CRC of [lo, hi)
		if hi < to {
			// block = head || tail: CRC(block) = shift(CRC(head), |tail|) ^ CRC(tail)
			part = unshiftCRC(part^chunkio.CRC(content[hi:to]), to-hi)
		}
		if lo > from {
			// head = before || part: CRC(head) = shift(CRC(before), |part|) ^ CRC(part)
			part ^= shiftCRC(chunkio.CRC(content[from:lo]), hi-lo)
		}
		crc = shiftCRC(crc, hi-lo) ^ part
	}
	return crc, nil
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
// read copied out (and checked, block by block). For block-aligned ranges
// (and ranges that end the chunk) it is combined from the blocks' checksums
// without touching the bytes.
func RangeCRC(v *storagepb.Version, off uint32, data []byte) uint32 {
	if blockAligned(v, off, uint32(len(data))) {
		if crc, err := spanCRC(v, nil, off, off+uint32(len(data))); err == nil {
			return crc
		}
	}
	return chunkio.CRC(data)
}

// blockAligned reports whether n bytes of v at off are whole blocks (the
// last may end the chunk).
func blockAligned(v *storagepb.Version, off, n uint32) bool {
	end := off + n
	return off%blockSize == 0 && (end%blockSize == 0 || end == v.Length)
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
