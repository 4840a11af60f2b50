package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/server/internal/pebbledb"
)

// chunkKey is the chunk's metadata key: big-endian, so one file's chunks sort
// together and in order.
func chunkKey(c chunkio.ID) []byte {
	k := make([]byte, 13)
	k[0] = 'c'
	binary.BigEndian.PutUint64(k[1:], c.Inode)
	binary.BigEndian.PutUint32(k[9:], c.Index)
	return k
}

func chunkFromKey(k []byte) (chunkio.ID, bool) {
	if len(k) != 13 || k[0] != 'c' {
		return chunkio.ID{}, false
	}
	return chunkio.ID{Inode: binary.BigEndian.Uint64(k[1:]), Index: binary.BigEndian.Uint32(k[9:])}, true
}

// fileName is the name of one of the chunk's two files (slot 0 or 1).
func fileName(c chunkio.ID, slot uint32) string {
	return fmt.Sprintf("%016x-%08x.s%d", c.Inode, c.Index, slot)
}

func parseFileName(name string) (chunkio.ID, bool) {
	base, slot, ok := strings.Cut(name, ".")
	if !ok || len(base) != 25 || base[16] != '-' || (slot != "s0" && slot != "s1") {
		return chunkio.ID{}, false
	}
	ino, err1 := strconv.ParseUint(base[:16], 16, 64)
	idx, err2 := strconv.ParseUint(base[17:], 16, 32)
	if err1 != nil || err2 != nil {
		return chunkio.ID{}, false
	}
	return chunkio.ID{Inode: ino, Index: uint32(idx)}, true
}

// blockSize is the unit chunk data is checksummed in: a read checks (so
// reads from disk) whole blocks, so small blocks keep small random reads
// cheap; each costs 4 bytes of metadata.
const blockSize = 4 << 10

// EngineConfig configures a chunk engine. Zero fields take the defaults.
type EngineConfig struct {
	// Dir is the target's directory: metadata in Dir/meta (Pebble), chunk
	// data in Dir/chunks.
	Dir string
	// FS carries chunk-data I/O (default OSFS).
	FS FS
	// Compress stores a chunk s2-compressed when that saves an eighth or more.
	Compress bool
	// MaxChunkSize bounds a chunk (default 4 MiB).
	MaxChunkSize int
	// BootID names the running boot of the machine (default: the kernel's
	// boot id). Opening a target last opened under another one settles it
	// (settle); tests set it to act out a power loss.
	BootID string
}

// Engine stores one target's chunks. See the package doc for what is synced
// and why. Safe for concurrent use; updates to one chunk are serialized.
type Engine struct {
	cfg    EngineConfig
	fs     FS
	chunks string
	db     *pebble.DB
	files  *fileCache
	// recent names chunks whose records may not have reached the kernel
	// (see recentLog); noted counts its entries since the last sync of
	// the records, which the loop that stop ends makes every 100 ms.
	recent *recentLog
	noted  atomic.Int64
	boot   string
	stop   context.CancelFunc
	loop   sync.WaitGroup
	// closeOnce, closeErr: Close's work and its result
	closeOnce sync.Once
	closeErr  error
	metaMu    sync.RWMutex
	metas     map[chunkio.ID]*storagepb.ChunkMeta // decoded records (see Meta)
	metaGen   uint64                              // bumped by every record write
	locks     [64]sync.Mutex                      // one update at a time per chunk
	slots     [256]sync.RWMutex                   // a slot's file: readers share, the writer of a new version excludes them
	// slotGens count the writes into each slot lock's files (bumped under
	// the lock, before the write), so that a reader that let go of the
	// lock can tell whether its view of a file was written over (View).
	slotGens [256]atomic.Uint64
}

// OpenEngine opens (or creates) the target in cfg.Dir and removes the files
// of chunks that have no record: leftovers of a first write a crash cut
// short, or of a removal.
func OpenEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.FS == nil {
		cfg.FS = OSFS{}
	}
	if cfg.MaxChunkSize <= 0 {
		cfg.MaxChunkSize = 4 << 20
	}
	e := &Engine{cfg: cfg, fs: cfg.FS, chunks: join(cfg.Dir, "chunks"), files: newFileCache(1024), metas: map[chunkio.ID]*storagepb.ChunkMeta{}}
	if err := e.fs.MkdirAll(e.chunks); err != nil {
		return nil, fmt.Errorf("open target %s: %w", cfg.Dir, err)
	}
	db, err := pebbledb.Open(join(cfg.Dir, "meta"))
	if err != nil {
		return nil, fmt.Errorf("open target %s metadata: %w", cfg.Dir, err)
	}
	e.db = db
	if e.boot = cfg.BootID; e.boot == "" {
		e.boot = systemBootID()
	}
	if e.recent, err = openRecent(cfg.Dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("open target %s: %w", cfg.Dir, err)
	}
	if err := e.settle(); err != nil {
		e.recent.close()
		db.Close()
		return nil, fmt.Errorf("open target %s: settle stored versions: %w", cfg.Dir, err)
	}
	if err := e.removeOrphans(); err != nil {
		e.recent.close()
		db.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	e.loop.Add(1)
	go func() {
		defer e.loop.Done()
		tick.Every(ctx, 100*time.Millisecond, e.syncRecords)
	}()
	return e, nil
}

// Space is the size of the target's file system and what is free on it
// for the target (statfs: blocks available to unprivileged users).
func (e *Engine) Space() (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.cfg.Dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", e.cfg.Dir, err)
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// Close syncs the records, then closes the metadata store and the open
// chunk files. Closing again does nothing.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.stop()
		e.loop.Wait()
		err := e.syncRecordsNow()
		if err == nil {
			err = e.recent.clear()
		}
		e.recent.close()
		e.files.close()
		e.closeErr = errors.Join(err, e.db.Close())
	})
	return e.closeErr
}

func (e *Engine) lock(id chunkio.ID) *sync.Mutex {
	h := fnv.New32a()
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], id.Inode)
	binary.LittleEndian.PutUint32(b[8:], id.Index)
	h.Write(b[:])
	return &e.locks[h.Sum32()%uint32(len(e.locks))]
}

func (e *Engine) slotLock(id chunkio.ID, slot uint32) *sync.RWMutex {
	return &e.slots[slotIndex(id, slot)]
}

// slotWritten marks a write into one of the chunk's files; call it with
// the slot's lock held, before writing.
func (e *Engine) slotWritten(id chunkio.ID, slot uint32) {
	e.slotGens[slotIndex(id, slot)].Add(1)
	e.files.written(fileKey{id, slot})
}

func slotIndex(id chunkio.ID, slot uint32) uint32 {
	h := fnv.New32a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], id.Inode)
	binary.LittleEndian.PutUint32(b[8:], id.Index)
	binary.LittleEndian.PutUint32(b[12:], slot)
	h.Write(b[:])
	return h.Sum32() % 256
}

func (e *Engine) removeOrphans() error {
	names, err := e.fs.List(e.chunks)
	if err != nil {
		return fmt.Errorf("list chunks: %w", err)
	}
	for _, name := range names {
		id, ok := parseFileName(name)
		if !ok {
			continue
		}
		m, err := e.Meta(id)
		if err != nil {
			return err
		}
		if m.Committed != nil || m.Pending != nil {
			continue
		}
		if err := e.fs.Remove(join(e.chunks, name)); err != nil && !isNotExist(err) {
			return fmt.Errorf("remove orphan chunk file %s: %w", name, err)
		}
	}
	return nil
}

// Meta returns the chunk's record (an empty one if the chunk is unknown).
// It is shared: callers must not change it. Records are cached decoded,
// because decoding a chunk's block checksums on every small read was most
// of a read's cost; the engine is the only writer, and every write goes
// through putMeta, which replaces the cached record.
func (e *Engine) Meta(id chunkio.ID) (*storagepb.ChunkMeta, error) {
	e.metaMu.RLock()
	m, gen := e.metas[id], e.metaGen
	e.metaMu.RUnlock()
	if m != nil {
		return m, nil
	}
	v, closer, err := e.db.Get(chunkKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return &storagepb.ChunkMeta{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	defer closer.Close()
	m = &storagepb.ChunkMeta{}
	if err := proto.Unmarshal(v, m); err != nil {
		return nil, fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	// Cache what we read only if no record changed since we looked: a write
	// racing with this read must not be undone by it.
	e.metaMu.Lock()
	if e.metaGen == gen {
		e.insertMetaLocked(id, m)
	}
	e.metaMu.Unlock()
	return m, nil
}

// metaForUpdate returns a copy of the chunk's record to change and store.
func (e *Engine) metaForUpdate(id chunkio.ID) (*storagepb.ChunkMeta, error) {
	m, err := e.Meta(id)
	if err != nil {
		return nil, err
	}
	return proto.Clone(m).(*storagepb.ChunkMeta), nil
}

const maxCachedMetas = 1 << 16

// cacheMeta records a write of the chunk's record (nil: removed).
func (e *Engine) cacheMeta(id chunkio.ID, m *storagepb.ChunkMeta) {
	e.metaMu.Lock()
	defer e.metaMu.Unlock()
	e.metaGen++
	if m == nil {
		delete(e.metas, id)
		return
	}
	e.insertMetaLocked(id, m)
}

func (e *Engine) insertMetaLocked(id chunkio.ID, m *storagepb.ChunkMeta) {
	if len(e.metas) >= maxCachedMetas {
		for k := range e.metas { // any one: map order is random
			delete(e.metas, k)
			break
		}
	}
	e.metas[id] = m
}

func (e *Engine) putMeta(id chunkio.ID, m *storagepb.ChunkMeta, sync bool) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	err = e.db.Set(chunkKey(id), b, opts)
	if err != nil {
		e.cacheMeta(id, nil)
		return fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	e.cacheMeta(id, m)
	return nil
}

// Prepare stores version ver of the chunk as its pending version: data at
// off over the committed content (or, with full, data as the whole content).
// The data is durable when Prepare returns; the record naming it is made
// durable by the Commit that follows (see the package doc). Preparing the
// same version again replaces it (a retried forward); preparing a version
// at or below the committed one is refused with ErrVersion.
func (e *Engine) Prepare(id chunkio.ID, ver uint64, off uint32, data []byte, full bool, chainVer uint64) (*storagepb.Version, error) {
	v, _, err := e.store(storeRequest{id: id, ver: ver, off: off, data: data, full: full, chainVer: chainVer})
	return v, err
}

// PrepareCommit is Prepare and Commit at once, with one durable record: a
// chain's tail, and a chain of one, commit as they store.
func (e *Engine) PrepareCommit(id chunkio.ID, ver uint64, off uint32, data []byte, full bool, chainVer uint64) (*storagepb.Version, error) {
	v, _, err := e.store(storeRequest{id: id, ver: ver, off: off, data: data, full: full, chainVer: chainVer, commit: true})
	return v, err
}

// storeRequest is one Prepare or PrepareCommit, with the node's options.
type storeRequest struct {
	id       chunkio.ID
	ver      uint64
	off      uint32
	data     []byte
	full     bool
	chainVer uint64
	commit   bool // PrepareCommit
	// want, if set, is data's CRC32C: nothing is stored unless it matches
	// (ErrChecksum). For a full chunk the check costs nothing, because the
	// content's CRC is combined from the block checksums the version needs
	// anyway, so a replica passes over pulled bytes once instead of twice.
	want *uint32
	// deferSync (Prepare only) leaves the data unsynced and returns what
	// syncs it, for the caller to run while its successors store. The
	// caller must run it, successfully, before it commits the version.
	deferSync bool
	// chain is the chain the chunk belongs to (0: keep the record's), and
	// client, seq the client update making the version (see UpdateTag).
	chain       uint32
	client, seq uint64
	// wantVer, if set, is the new version's content CRC as the chain's
	// head made it: a replica whose result differs (it patched another
	// base) stores nothing and reports ErrDiverged.
	wantVer *uint32
}

// store is Prepare (or PrepareCommit, with r.commit). With r.deferSync it
// returns what syncs the data for the caller to run (see
// storeRequest.deferSync); otherwise that is nil.
func (e *Engine) store(r storeRequest) (*storagepb.Version, func() error, error) {
	id, ver, off, data := r.id, r.ver, r.off, r.data
	if uint64(off)+uint64(len(data)) > uint64(e.cfg.MaxChunkSize) {
		return nil, nil, fmt.Errorf("chunk %v: write to %d: %w (%d)", id, uint64(off)+uint64(len(data)), chunkio.ErrTooLarge, e.cfg.MaxChunkSize)
	}
	if r.want != nil && !r.full && chunkio.CRC(data) != *r.want {
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
	if !r.full {
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
	if r.want != nil && r.full && v.Crc != *r.want {
		return nil, nil, fmt.Errorf("chunk %v: data to store: %w", id, chunkio.ErrChecksum)
	}
	if r.wantVer != nil && v.Crc != *r.wantVer {
		return nil, nil, fmt.Errorf("chunk %v version %d: content CRC %08x here, %08x at the head: %w", id, ver, v.Crc, *r.wantVer, chunkio.ErrDiverged)
	}
	v.Client, v.Seq = r.client, r.seq
	if r.chain != 0 {
		m.Chain = r.chain
	}
	stored := content
	if e.cfg.Compress && len(content) > 0 {
		if enc := s2.Encode(nil, content); len(enc) <= len(content)-len(content)/8 {
			stored, v.Compressed = enc, true
		}
	}
	v.Stored = uint32(len(stored))
	v.Slot = freeSlot(m)
	if r.commit {
		return e.storeCommit(id, m, v, stored, r.chainVer)
	}
	w, err := e.writeFile(id, v, stored, false, isNew(m))
	var finish func() error
	if err == nil && r.deferSync {
		finish = w.sync
	} else if err == nil {
		err = w.sync()
	}
	if err != nil {
		if m.Pending != nil {
			// The failed write may have damaged the pending version's file.
			m.Pending = nil
			e.putMeta(id, m, false)
		}
		return nil, nil, err
	}
	m.Pending, m.ChainVer = v, r.chainVer
	if err := e.putMeta(id, m, false); err != nil {
		if finish != nil {
			finish()
		}
		return nil, nil, err
	}
	return v, finish, nil
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
		if m.Pending != nil {
			// The failed write may have damaged the pending version's file.
			m.Pending = nil
			e.putMeta(id, m, false)
		}
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

// close drops a write that will not be finished.
func (w *fileWrite) close() { w.f.Close() }

func diskError(id chunkio.ID, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("chunk %v: %w: %v", id, chunkio.ErrNoSpace, err)
	}
	return fmt.Errorf("chunk %v: %w", id, err)
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

// Chunks calls fn for every chunk in ID order until fn returns false.
func (e *Engine) Chunks(fn func(chunkio.ID, *storagepb.ChunkMeta) bool) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		id, ok := chunkFromKey(it.Key())
		if !ok {
			continue
		}
		m := &storagepb.ChunkMeta{}
		if err := proto.Unmarshal(it.Value(), m); err != nil {
			return fmt.Errorf("chunk %v metadata: %w", id, err)
		}
		if !fn(id, m) {
			break
		}
	}
	return it.Error()
}

// Remove deletes a chunk: metadata first (synced), then its files, and
// their removal is synced too: a file of a removed chunk that came back
// after a crash could otherwise be taken by a chunk of the same name
// created later.
func (e *Engine) Remove(id chunkio.ID) error {
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	err := e.db.Delete(chunkKey(id), pebble.Sync)
	e.cacheMeta(id, nil)
	if err != nil {
		return fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	for slot := uint32(0); slot < 2; slot++ {
		if err := e.dropFile(id, slot); err != nil {
			return err
		}
	}
	if err := e.fs.SyncDir(e.chunks); err != nil {
		return diskError(id, err)
	}
	return nil
}

// dropFile removes one of the chunk's files under its slot's lock: readers
// holding a view of it see it written over (slotWritten), and the file
// cache lets it go. Syncing the directory is the caller's.
func (e *Engine) dropFile(id chunkio.ID, slot uint32) error {
	l := e.slotLock(id, slot)
	l.Lock()
	defer l.Unlock()
	e.slotWritten(id, slot)
	e.files.evict(fileKey{id, slot})
	if err := e.fs.Remove(join(e.chunks, fileName(id, slot))); err != nil && !isNotExist(err) {
		return diskError(id, err)
	}
	return nil
}
