package chunkstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/server/internal/pebbledb"
)

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
	// Logger receives the metadata store's (Pebble's) errors (default
	// slog.Default()).
	Logger *slog.Logger
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
	db, err := pebbledb.Open(join(cfg.Dir, "meta"), cfg.Logger, 0) // chunk records are cached above it (metas)
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

func diskError(id chunkio.ID, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("chunk %v: %w: %v", id, chunkio.ErrNoSpace, err)
	}
	return fmt.Errorf("chunk %v: %w", id, err)
}
