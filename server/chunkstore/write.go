package chunkstore

import (
	"fmt"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/klauspost/compress/s2"

	"github.com/sluicefs/sluice/proto/storagepb"
)

// Prepare stores version ver of the chunk as its pending version: data at
// off over the committed content (or, with full, data as the whole content).
// The data is durable when Prepare returns; the record naming it is made
// durable by the Commit that follows (see the package doc). Preparing the
// same version again replaces it (a retried forward); preparing a version
// at or below the committed one is refused with ErrVersion.
func (e *Engine) Prepare(id chunkio.ID, ver uint64, off uint32, data []byte, full bool, chainVer uint64) (*storagepb.Version, error) {
	v, _, err := e.Store(StoreRequest{ID: id, Ver: ver, Off: off, Data: data, Full: full, ChainVer: chainVer})
	return v, err
}

// PrepareCommit is Prepare and Commit at once, with one durable record: a
// chain's tail, and a chain of one, commit as they store.
func (e *Engine) PrepareCommit(id chunkio.ID, ver uint64, off uint32, data []byte, full bool, chainVer uint64) (*storagepb.Version, error) {
	v, _, err := e.Store(StoreRequest{ID: id, Ver: ver, Off: off, Data: data, Full: full, ChainVer: chainVer, Commit: true})
	return v, err
}

// StoreRequest is one Prepare or PrepareCommit with the options a chain's
// node needs beyond them: the CRC checks of a replicated update, the
// deferred sync that overlaps a node's disk wait with its successors', and
// the chain and client update the version belongs to.
type StoreRequest struct {
	ID       chunkio.ID
	Ver      uint64
	Off      uint32
	Data     []byte
	Full     bool
	ChainVer uint64
	Commit   bool // PrepareCommit
	// Want, if set, is Data's CRC32C: nothing is stored unless it matches
	// (ErrChecksum). For a full chunk the check costs nothing, because the
	// content's CRC is combined from the block checksums the version needs
	// anyway, so a replica passes over pulled bytes once instead of twice.
	Want *uint32
	// DeferSync (Prepare only) leaves the data unsynced and returns what
	// syncs it, for the caller to run while its successors store. The
	// caller must run it, successfully, before it commits the version.
	DeferSync bool
	// Chain is the chain the chunk belongs to (0: keep the record's), and
	// Client, Seq the client update making the version (see UpdateTag).
	Chain       uint32
	Client, Seq uint64
	// WantVer, if set, is the new version's content CRC as the chain's
	// head made it: a replica whose result differs (it patched another
	// base) stores nothing and reports ErrDiverged.
	WantVer *uint32
}

// Store is Prepare (or PrepareCommit, with r.Commit) with r's options.
// With r.DeferSync it returns what syncs the data for the caller to run
// (see StoreRequest.DeferSync); otherwise that is nil.
func (e *Engine) Store(r StoreRequest) (*storagepb.Version, func() error, error) {
	id, ver, off, data := r.ID, r.Ver, r.Off, r.Data
	if uint64(off)+uint64(len(data)) > uint64(e.cfg.MaxChunkSize) {
		return nil, nil, fmt.Errorf("chunk %v: write to %d: %w (%d)", id, uint64(off)+uint64(len(data)), chunkio.ErrTooLarge, e.cfg.MaxChunkSize)
	}
	if r.Want != nil && !r.Full && chunkio.CRC(data) != *r.Want {
		return nil, nil, fmt.Errorf("chunk %v: data to store: %w", id, chunkio.ErrChecksum)
	}
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	m, err := e.metaForUpdate(id)
	if err != nil {
		return nil, nil, err
	}
	if c := m.GetCommitted(); c != nil && ver <= c.Ver {
		return nil, nil, fmt.Errorf("chunk %v: prepare version %d, committed %d: %w", id, ver, c.Ver, chunkio.ErrVersion)
	}
	content := data
	if !r.Full {
		base, err := e.content(id, m.GetCommitted())
		if err != nil {
			return nil, nil, err
		}
		end := max(len(base), int(off)+len(data))
		content = make([]byte, end)
		copy(content, base)
		copy(content[off:], data)
	}
	v := newVersion(ver, content)
	if r.Want != nil && r.Full && v.Crc != *r.Want {
		return nil, nil, fmt.Errorf("chunk %v: data to store: %w", id, chunkio.ErrChecksum)
	}
	if r.WantVer != nil && v.Crc != *r.WantVer {
		return nil, nil, fmt.Errorf("chunk %v version %d: content CRC %08x here, %08x at the head: %w", id, ver, v.Crc, *r.WantVer, chunkio.ErrDiverged)
	}
	v.Client, v.Seq = r.Client, r.Seq
	if r.Chain != 0 {
		m.Chain = r.Chain
	}
	stored := content
	if e.cfg.Compress && len(content) > 0 {
		if enc := s2.Encode(nil, content); len(enc) <= len(content)-len(content)/8 {
			stored, v.Compressed = enc, true
		}
	}
	v.Stored = uint32(len(stored))
	v.Slot = freeSlot(m)
	if r.Commit {
		return e.storeCommit(id, m, v, stored, r.ChainVer)
	}
	w, err := e.writeFile(id, v, stored, false, isNew(m))
	var finish func() error
	if err == nil && r.DeferSync {
		finish = w.sync
	} else if err == nil {
		err = w.sync()
	}
	if err != nil {
		e.dropDamagedPending(id, m)
		return nil, nil, err
	}
	m.Pending, m.ChainVer = v, r.ChainVer
	if err := e.putMeta(id, m, false); err != nil {
		if finish != nil {
			finish()
		}
		return nil, nil, err
	}
	return v, finish, nil
}

// dropDamagedPending forgets the chunk's pending version after a failed
// write into the free slot, which is where that version's file is: the
// write may have damaged it.
func (e *Engine) dropDamagedPending(id chunkio.ID, m *storagepb.ChunkMeta) {
	if m.Pending != nil {
		m.Pending = nil
		e.putMeta(id, m, false)
	}
}

// storeCommit stores v (its bytes: stored) as the chunk's committed
// version, waiting for the disk once: the data and its trailer are synced
// together, then the record that commits v is written without a sync (the
// trailer is what finds v again if a crash of the machine loses the
// record; see settle), except for a chunk's first version,
// whose record is synced so that a chunk with no record was never
// acknowledged.
func (e *Engine) storeCommit(id chunkio.ID, m *storagepb.ChunkMeta, v *storagepb.Version, stored []byte, chainVer uint64) (*storagepb.Version, func() error, error) {
	w, err := e.writeFile(id, v, stored, true, isNew(m))
	if err == nil {
		err = w.sync()
	}
	if err != nil {
		e.dropDamagedPending(id, m)
		return nil, nil, err
	}
	next := &storagepb.ChunkMeta{Committed: v, ChainVer: chainVer, Chain: m.Chain, Applied: applied(m.Applied, v)}
	if m.GetCommitted() == nil {
		err = e.putMeta(id, next, true)
	} else {
		err = e.putRecent(id, next)
	}
	if err != nil {
		return nil, nil, err
	}
	return v, nil, nil
}

// freeSlot is the slot a new version of the chunk goes to: the one the
// committed version is not in. A pending version there is overwritten.
func freeSlot(m *storagepb.ChunkMeta) uint32 {
	if c := m.GetCommitted(); c != nil {
		return 1 - c.Slot
	}
	return 0
}

// isNew says the record names no version: the chunk's first is coming.
func isNew(m *storagepb.ChunkMeta) bool { return m.Committed == nil && m.Pending == nil }

// writeFile writes version v (its bytes: b) into its slot's file, in
// place, followed by its trailer (committed: v is committed as it is
// stored), and returns the write, not yet durable, for the caller to sync.
// For a chunk's first version (first) it removes the chunk's other file
// first, durably with the write's sync: one left by an earlier chunk of
// the same name (a removal whose unlink failed) could hold a higher
// version that a settle would take. No record names that slot for reading meanwhile
// (the committed version is in the other one), and the slot's lock keeps
// out readers that looked it up before.
func (e *Engine) writeFile(id chunkio.ID, v *storagepb.Version, b []byte, committed, first bool) (*fileWrite, error) {
	if first {
		if err := e.dropFile(id, 1-v.Slot); err != nil {
			return nil, err
		}
	}
	l := e.slotLock(id, v.Slot)
	l.Lock()
	defer l.Unlock()
	e.slotWritten(id, v.Slot)
	name := join(e.chunks, fileName(id, v.Slot))
	f, created, err := e.fs.OpenWrite(name)
	if err != nil {
		return nil, diskError(id, err)
	}
	w := &fileWrite{e: e, id: id, f: f, created: created || first}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		_, err = f.WriteAt(newTrailer(id, v, committed).encode(), int64(len(b)))
	}
	if err == nil {
		err = f.Truncate(int64(len(b)) + trailerSize)
	}
	if err != nil {
		f.Close()
		return nil, diskError(id, err)
	}
	return w, nil
}

// fileWrite is a write into a chunk's file that is in the kernel, not yet
// durable. Finish it with sync.
type fileWrite struct {
	e  *Engine
	id chunkio.ID
	f  File
	// created: the chunks directory changed (the file is new, or the
	// chunk's other file was removed), so sync syncs it too
	created bool
}

// sync makes the write durable (fdatasync: the data, the trailer and the
// file's size, and the directory's entry for a new file) and closes the
// file.
func (w *fileWrite) sync() error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && w.created {
		err = w.e.fs.SyncDir(w.e.chunks)
	}
	if err != nil {
		return diskError(w.id, err)
	}
	return nil
}

// Replace makes data version ver of the chunk, committed at once, whatever
// the chunk held: resync's full-chunk replacement from a chain predecessor,
// with its record of applied updates.
func (e *Engine) Replace(id chunkio.ID, chain uint32, ver uint64, data []byte, tags []*storagepb.UpdateTag) error {
	if len(data) > e.cfg.MaxChunkSize {
		return fmt.Errorf("chunk %v: %w", id, chunkio.ErrTooLarge)
	}
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	m, err := e.metaForUpdate(id)
	if err != nil {
		return err
	}
	v := newVersion(ver, data)
	v.Slot = freeSlot(m)
	w, err := e.writeFile(id, v, data, true, isNew(m))
	if err == nil {
		err = w.sync()
	}
	if err != nil {
		return err
	}
	// The other file may hold a higher version (a resync can go back), whose
	// trailer a later settle would take: it goes, durably, before the
	// record names the new version, so no crash leaves the two together.
	// (A crash in between leaves a record naming a removed file: reads of
	// it fail, as a syncing target's are not served, and the target comes
	// back syncing and gets the chunk again.)
	if err := e.dropFile(id, 1-v.Slot); err != nil {
		return err
	}
	if err := e.fs.SyncDir(e.chunks); err != nil {
		return diskError(id, err)
	}
	return e.putMeta(id, &storagepb.ChunkMeta{Committed: v, ChainVer: m.ChainVer, Chain: chain, Applied: tags}, true)
}

// newVersion describes uncompressed content as version ver.
// One pass: each block is checksummed once and the whole content's CRC is
// combined from the blocks'.
func newVersion(ver uint64, content []byte) *storagepb.Version {
	v := &storagepb.Version{Ver: ver, Length: uint32(len(content)), Stored: uint32(len(content))}
	v.BlockCrcs = make([]uint32, 0, (len(content)+blockSize-1)/blockSize)
	for b := 0; b < len(content); b += blockSize {
		block := content[b:min(b+blockSize, len(content))]
		c := chunkio.CRC(block)
		v.BlockCrcs = append(v.BlockCrcs, c)
		v.Crc = crcCombine(v.Crc, c, len(block))
	}
	return v
}

// Commit makes version ver, prepared before, the committed one, with a
// synced record: a chain's node that is not its tail commits when its
// successor has, and its own commit must survive it (its trailer says
// pending, and settle never takes a pending version). Committing a version
// already committed (or superseded) is a no-op.
func (e *Engine) Commit(id chunkio.ID, ver uint64) (*storagepb.Version, error) {
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	m, err := e.metaForUpdate(id)
	if err != nil {
		return nil, err
	}
	if c := m.GetCommitted(); c != nil && c.Ver >= ver {
		return c, nil
	}
	p := m.GetPending()
	if p == nil || p.Ver != ver {
		return nil, fmt.Errorf("chunk %v: commit %d, pending %d: %w", id, ver, p.GetVer(), chunkio.ErrVersion)
	}
	m.Committed, m.Pending, m.Applied = p, nil, applied(m.Applied, p)
	if err := e.putMeta(id, m, true); err != nil {
		return nil, err
	}
	return p, nil
}

// maxApplied is how many client updates a chunk's record remembers: a
// retry is recognised as long as fewer other updates of the chunk came
// after it (a retry comes within seconds; the chain takes no other update
// of the chunk while it is down).
const maxApplied = 16

// applied is tags with v's update added, if a client made it.
func applied(tags []*storagepb.UpdateTag, v *storagepb.Version) []*storagepb.UpdateTag {
	if v.Client == 0 {
		return tags
	}
	tags = append(tags, &storagepb.UpdateTag{Client: v.Client, Seq: v.Seq, Ver: v.Ver})
	if len(tags) > maxApplied {
		tags = tags[len(tags)-maxApplied:]
	}
	return tags
}

// Applied finds a client update among those the chunk's committed versions
// came from, and returns the version it made.
func (e *Engine) Applied(id chunkio.ID, client, seq uint64) (uint64, bool, error) {
	m, err := e.Meta(id)
	if err != nil {
		return 0, false, err
	}
	for _, t := range m.Applied {
		if t.Client == client && t.Seq == seq {
			return t.Ver, true, nil
		}
	}
	return 0, false, nil
}

// Abort drops pending version ver of the chunk: a pending version that
// can no longer be read back whole (torn by a power loss before its sync)
// is given up rather than left to stop every later update.
func (e *Engine) Abort(id chunkio.ID, ver uint64) error {
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	m, err := e.metaForUpdate(id)
	if err != nil {
		return err
	}
	if m.GetPending().GetVer() != ver {
		return nil
	}
	m.Pending = nil
	return e.putMeta(id, m, false)
}
