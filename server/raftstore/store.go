package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/sluicefs/sluice/server/internal/pebbledb"
)

// ErrKeyNotFound is what Get returns for a key never set. hashicorp/raft
// checks for this exact text.
var ErrKeyNotFound = errors.New("not found")

// Store is a raft.LogStore and raft.StableStore on Pebble.
type Store struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens (or creates) the store in dir; Pebble's errors go to log (nil:
// slog.Default()).
func Open(dir string, log *slog.Logger) (*Store, error) {
	db, err := pebbledb.Open(dir, log, 0)
	if err != nil {
		return nil, fmt.Errorf("open raft store %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

const (
	logPrefix    = 'l'
	stablePrefix = 's'
)

func logKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = logPrefix
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

var (
	logLower = []byte{logPrefix}
	logUpper = []byte{logPrefix + 1}
)

func (s *Store) edgeIndex(last bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := it.First()
	if last {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

// FirstIndex returns the first index in the log, 0 when it is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.edgeIndex(false) }

// LastIndex returns the last index in the log, 0 when it is empty.
func (s *Store) LastIndex() (uint64, error) { return s.edgeIndex(true) }

// GetLog reads entry index into log; raft.ErrLogNotFound if absent.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raft log %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, log); err != nil {
		return fmt.Errorf("raft log %d: %w", index, err)
	}
	return nil
}

// StoreLog appends one entry.
func (s *Store) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs appends entries in one synced batch.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raft log append: %w", err)
	}
	return nil
}

// DeleteRange removes entries min..max inclusive.
func (s *Store) DeleteRange(min, max uint64) error {
	if max < min {
		return nil
	}
	end := logKey(max + 1)
	if max == ^uint64(0) {
		end = logUpper
	}
	if err := s.db.DeleteRange(logKey(min), end, pebble.Sync); err != nil {
		return fmt.Errorf("raft log delete %d..%d: %w", min, max, err)
	}
	return nil
}

func stableKey(k []byte) []byte { return append([]byte{stablePrefix}, k...) }

// Set stores a stable value, synced.
func (s *Store) Set(key, val []byte) error {
	if err := s.db.Set(stableKey(key), val, pebble.Sync); err != nil {
		return fmt.Errorf("raft stable %q: %w", key, err)
	}
	return nil
}

// Get returns a stable value, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raft stable %q: %w", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 stores a stable integer.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns a stable integer, or ErrKeyNotFound.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raft stable %q: %d bytes, not an integer", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Log encoding: index u64 | term u64 | type u8 | appendedAt unix ns i64 |
// data length u32 | data | extensions length u32 | extensions.
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 33+len(l.Data)+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Extensions)))
	return append(b, l.Extensions...)
}

var errCorrupt = errors.New("corrupt log entry")

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 33 {
		return errCorrupt
	}
	l.Index = binary.BigEndian.Uint64(b)
	l.Term = binary.BigEndian.Uint64(b[8:])
	l.Type = raft.LogType(b[16])
	if at := int64(binary.BigEndian.Uint64(b[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	} else {
		l.AppendedAt = time.Time{}
	}
	n := int(binary.BigEndian.Uint32(b[25:]))
	b = b[29:]
	if n > len(b)-4 {
		return errCorrupt
	}
	l.Data = append([]byte(nil), b[:n]...)
	b = b[n:]
	m := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	if m != len(b) {
		return errCorrupt
	}
	l.Extensions = append([]byte(nil), b...)
	return nil
}
