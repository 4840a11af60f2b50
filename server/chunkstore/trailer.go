package chunkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/s2"

	"github.com/sluicefs/sluice/internal/crc32c"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// Every chunk file ends with a trailer that says which version of which
// chunk the bytes before it are: a file describes itself, so a version
// whose data was synced is found again even if its record was not. The
// trailer is written with the data and synced with it, in the same
// fdatasync, so storing a version waits for the disk once.
//
//	[0:4)   magic "SLV1"
//	[4:12)  version
//	[12:20) inode
//	[20:24) chunk index
//	[24:28) slot
//	[28:32) content length
//	[32:36) stored length (the bytes before the trailer)
//	[36:40) flags (1: stored s2-compressed; 2: committed as stored)
//	[40:44) CRC32C of the content
//	[44:60) zero
//	[60:64) CRC32C of [0:60)
const trailerSize = 64

var trailerMagic = [4]byte{'S', 'L', 'V', '1'}

type trailer struct {
	id         chunkio.ID
	slot       uint32
	ver        uint64
	length     uint32
	stored     uint32
	compressed bool
	// committed: the version was committed as it was stored (a chain's
	// tail, a chain of one, a resync's replacement), so finding it whole
	// is knowing it committed. Any other version was pending when stored;
	// its commit is a synced record (Engine.Commit), never a trailer.
	committed bool
	crc       uint32
}

const (
	flagCompressed = 1
	flagCommitted  = 2
)

func newTrailer(id chunkio.ID, v *storagepb.Version, committed bool) trailer {
	return trailer{id: id, slot: v.Slot, ver: v.Ver, length: v.Length, stored: v.Stored, compressed: v.Compressed, committed: committed, crc: v.Crc}
}

func (t trailer) encode() []byte {
	b := make([]byte, trailerSize)
	copy(b, trailerMagic[:])
	binary.LittleEndian.PutUint64(b[4:], t.ver)
	binary.LittleEndian.PutUint64(b[12:], t.id.Inode)
	binary.LittleEndian.PutUint32(b[20:], t.id.Index)
	binary.LittleEndian.PutUint32(b[24:], t.slot)
	binary.LittleEndian.PutUint32(b[28:], t.length)
	binary.LittleEndian.PutUint32(b[32:], t.stored)
	var flags uint32
	if t.compressed {
		flags |= flagCompressed
	}
	if t.committed {
		flags |= flagCommitted
	}
	binary.LittleEndian.PutUint32(b[36:], flags)
	binary.LittleEndian.PutUint32(b[40:], t.crc)
	binary.LittleEndian.PutUint32(b[60:], crc32c.Checksum(b[:60]))
	return b
}

// decodeTrailer reads a trailer; ok is false for anything torn, foreign or
// malformed.
func decodeTrailer(b []byte) (t trailer, ok bool) {
	if len(b) != trailerSize || [4]byte(b[:4]) != trailerMagic || crc32c.Checksum(b[:60]) != binary.LittleEndian.Uint32(b[60:]) {
		return trailer{}, false
	}
	flags := binary.LittleEndian.Uint32(b[36:])
	if flags&^(flagCompressed|flagCommitted) != 0 {
		return trailer{}, false
	}
	return trailer{
		ver:        binary.LittleEndian.Uint64(b[4:]),
		id:         chunkio.ID{Inode: binary.LittleEndian.Uint64(b[12:]), Index: binary.LittleEndian.Uint32(b[20:])},
		slot:       binary.LittleEndian.Uint32(b[24:]),
		length:     binary.LittleEndian.Uint32(b[28:]),
		stored:     binary.LittleEndian.Uint32(b[32:]),
		compressed: flags&flagCompressed != 0,
		committed:  flags&flagCommitted != 0,
		crc:        binary.LittleEndian.Uint32(b[40:]),
	}, true
}

// bootKey holds the boot id of the machine the target was last opened on.
var bootKey = []byte("boot")

// systemBootID is the running kernel's boot id: it changes with every boot,
// so a target last opened under another one may have lost what the file
// system had not synced when that kernel stopped (see settle).
func systemBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "" // unknown: every open settles
	}
	return strings.TrimSpace(string(b))
}

// settle finds versions that were committed as they were stored, durably,
// but whose records were lost. Such records are written without a sync
// (the data's fdatasync, trailer included, is what makes the version
// durable), so a killed process can lose the last ones Pebble had not
// handed to the kernel yet, and a crash of the machine those the file
// system had not synced. After a kill the recent log names the chunks that
// may be affected; after a reboot (the target was last opened under
// another boot id, or the boot id cannot be read) the log may be lost too,
// and every chunk with a record is looked at. For each, both trailers are
// read, and the newest version marked committed, newer than the record's,
// whose bytes all check out, is synced (a killed process may have left it
// in the page cache only) and committed. Pending versions are never taken:
// a chain's node that is not its tail must not find itself committed to a
// version its successors may never have got. Chunks without a record are
// not looked at: a chunk's first record is synced, so a chunk without one
// was never acknowledged, or was removed.
func (e *Engine) settle() error {
	last := ""
	if v, closer, err := e.db.Get(bootKey); err == nil {
		last = string(v)
		closer.Close()
	} else if err != pebble.ErrNotFound {
		return fmt.Errorf("read boot id: %w", err)
	}
	ids, err := e.recent.chunks()
	if err != nil {
		return err
	}
	if e.boot == "" || last != e.boot {
		if ids, err = e.recordedChunks(); err != nil {
			return err
		}
	}
	seen := make(map[chunkio.ID]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if err := e.settleChunk(id); err != nil {
			return err
		}
	}
	// Synced: it also carries the records settled above to the disk, so
	// the log's entries can go.
	if err := e.syncRecordsNow(); err != nil {
		return err
	}
	return e.recent.clear()
}

// recordedChunks lists every chunk with a record.
func (e *Engine) recordedChunks() ([]chunkio.ID, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
	if err != nil {
		return nil, err
	}
	var ids []chunkio.ID
	for it.First(); it.Valid(); it.Next() {
		if id, ok := chunkFromKey(it.Key()); ok {
			ids = append(ids, id)
		}
	}
	return ids, it.Close()
}

// syncRecordsNow makes every record written so far durable, with one
// synced write (of the boot id).
func (e *Engine) syncRecordsNow() error {
	if err := e.db.Set(bootKey, []byte(e.boot), pebble.Sync); err != nil {
		return fmt.Errorf("sync records: %w", err)
	}
	return nil
}

// settleChunk commits the newest version of the chunk that was committed
// as stored and is newer than its record's committed one, if there is one.
func (e *Engine) settleChunk(id chunkio.ID) error {
	m, err := e.metaForUpdate(id)
	if err != nil {
		return err
	}
	if m.Committed == nil && m.Pending == nil {
		return nil // removed, or never acknowledged
	}
	var best *storagepb.Version
	for slot := uint32(0); slot < 2; slot++ {
		v, ok, err := e.storedVersion(id, slot, max(m.GetCommitted().GetVer(), best.GetVer()))
		if err != nil {
			return err
		}
		if ok {
			best = v
		}
	}
	if best == nil {
		return nil
	}
	return e.putMeta(id, &storagepb.ChunkMeta{Committed: best, ChainVer: m.ChainVer, Chain: m.Chain, Applied: m.Applied}, false)
}

// storedVersion returns the version in one of the chunk's files if its
// trailer marks it committed and newer than after, and every byte of it
// checks out; it syncs the file before it says so. ok is false for a
// missing, older, pending, torn, foreign or damaged file; err is a failed
// sync.
func (e *Engine) storedVersion(id chunkio.ID, slot uint32, after uint64) (v *storagepb.Version, ok bool, err error) {
	f, err := e.fs.Open(join(e.chunks, fileName(id, slot)))
	if err != nil {
		return nil, false, nil
	}
	defer f.Close()
	var tb [trailerSize]byte
	if vw, isView := f.(Viewer); isView { // read the trailer alone first
		size, err := vw.Size()
		if err != nil || size < trailerSize {
			return nil, false, nil
		}
		if _, err := f.ReadAt(tb[:], size-trailerSize); err != nil {
			return nil, false, nil
		}
		if t, ok := decodeTrailer(tb[:]); !ok || !t.committed || t.ver <= after {
			return nil, false, nil
		}
	}
	all, err := readAllAt(f, int64(e.cfg.MaxChunkSize)+trailerSize)
	if err != nil || len(all) < trailerSize {
		return nil, false, nil
	}
	t, ok := decodeTrailer(all[len(all)-trailerSize:])
	data := all[:len(all)-trailerSize]
	if !ok || !t.committed || t.ver <= after || t.id != id || t.slot != slot || int(t.stored) != len(data) {
		return nil, false, nil
	}
	content := data
	if t.compressed {
		if content, err = s2.Decode(nil, data); err != nil {
			return nil, false, nil
		}
	}
	if len(content) != int(t.length) {
		return nil, false, nil
	}
	v = newVersion(t.ver, content)
	if v.Crc != t.crc {
		return nil, false, nil
	}
	if err := f.Sync(); err != nil {
		return nil, false, diskError(id, err)
	}
	v.Slot, v.Stored, v.Compressed = slot, t.stored, t.compressed
	return v, true, nil
}

// readAllAt reads a whole file of at most max bytes.
func readAllAt(f File, max int64) ([]byte, error) {
	buf := make([]byte, max+1)
	n, err := f.ReadAt(buf, 0)
	if n > int(max) {
		return nil, fmt.Errorf("file larger than %d bytes", max)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}
