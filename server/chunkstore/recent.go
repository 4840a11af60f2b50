package chunkstore

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/internal/crc32c"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// recentLog names the chunks whose records were written since the last
// synced write to the target's Pebble store. Records go to Pebble without
// a sync, and Pebble keeps such writes in its own buffers for a while, so
// a killed process can lose the last of them although the versions they
// name are durable (data and trailer synced). Opening the target settles
// the chunks the log names, reading their trailers; a synced write to
// Pebble (Engine.syncRecords, every 100 ms while records are written)
// retires the entries before it.
//
// The log is two files, written with plain write(2) and never synced: an
// entry is in the kernel before its record is written, which is all a
// killed process needs; a crash of the machine, which may lose the log
// too, is what the boot id is for (settle then looks at every chunk).
// Writers append to the current file; retiring switches files, syncs
// Pebble, then empties the old one. Each entry is 16 bytes: inode, index,
// and a CRC32C of the two, so a torn one is skipped.
type recentLog struct {
	// mu: writers hold it shared from their entry's write until their
	// record is written, so a switch waits for records whose entries went
	// to the old file, and the sync after it covers them.
	mu    sync.RWMutex
	files [2]*os.File
	cur   int
}

const recentEntry = 16

func openRecent(dir string) (*recentLog, error) {
	l := &recentLog{}
	for i := range l.files {
		f, err := os.OpenFile(join(dir, fmt.Sprintf("recent.%d", i)), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("open recent chunks log: %w", err)
		}
		l.files[i] = f
	}
	return l, nil
}

// chunks returns every chunk either file names.
func (l *recentLog) chunks() ([]chunkio.ID, error) {
	var ids []chunkio.ID
	for _, f := range l.files {
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("recent chunks log: %w", err)
		}
		b := make([]byte, st.Size())
		if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
			return nil, fmt.Errorf("recent chunks log: %w", err)
		}
		for ; len(b) >= recentEntry; b = b[recentEntry:] {
			if crc32c.Checksum(b[:12]) == binary.LittleEndian.Uint32(b[12:16]) {
				ids = append(ids, chunkio.ID{Inode: binary.LittleEndian.Uint64(b), Index: binary.LittleEndian.Uint32(b[8:])})
			}
		}
	}
	return ids, nil
}

// note writes id's entry; call it holding l.mu shared, before writing the
// chunk's record, and keep holding it until the record is written.
func (l *recentLog) note(id chunkio.ID) error {
	var b [recentEntry]byte
	binary.LittleEndian.PutUint64(b[:], id.Inode)
	binary.LittleEndian.PutUint32(b[8:], id.Index)
	binary.LittleEndian.PutUint32(b[12:], crc32c.Checksum(b[:12]))
	if _, err := l.files[l.cur].Write(b[:]); err != nil {
		return diskError(id, fmt.Errorf("recent chunks log: %w", err))
	}
	return nil
}

// retire switches files, runs sync (a synced write to Pebble, covering
// every record whose entry is in the old file), then empties the old file.
func (l *recentLog) retire(sync func() error) error {
	l.mu.Lock()
	old := l.cur
	l.cur ^= 1
	l.mu.Unlock()
	if err := sync(); err != nil {
		return err
	}
	return l.files[old].Truncate(0)
}

// clear empties both files; call it when nothing writes records.
func (l *recentLog) clear() error {
	for _, f := range l.files {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("recent chunks log: %w", err)
		}
	}
	return nil
}

func (l *recentLog) close() {
	for _, f := range l.files {
		if f != nil {
			f.Close()
		}
	}
}

// syncRecords retires the recent log's entries, if any were written, with
// a synced write to Pebble: the engine's background loop runs it every
// 100 ms, so the log stays short.
func (e *Engine) syncRecords() {
	if e.noted.Swap(0) == 0 {
		return
	}
	if err := e.recent.retire(e.syncRecordsNow); err != nil {
		e.noted.Add(1) // try again next time; the entries stay
	}
}

// putRecent writes the record of a version committed as stored without a
// sync, naming the chunk in the recent log first (see recentLog).
func (e *Engine) putRecent(id chunkio.ID, m *storagepb.ChunkMeta) error {
	e.recent.mu.RLock()
	defer e.recent.mu.RUnlock()
	if err := e.recent.note(id); err != nil {
		return err
	}
	e.noted.Add(1)
	return e.putMeta(id, m, false)
}
