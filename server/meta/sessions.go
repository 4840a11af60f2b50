package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/proto/metapb"
)

// Write sessions: a client that opens a file for writing records a session
// ("w" + inode + session -> client, opened at); closing it (or fsync) sets
// the file's length; the sessions of a client that died are pruned. The
// chunk collector leaves a file alone while any session on it is open.

func sessionRecordKey(ino, session uint64) []byte {
	k := binary.BigEndian.AppendUint64([]byte{'w'}, ino)
	return binary.BigEndian.AppendUint64(k, session)
}

// OpenSession records a write session on file ino.
func (ns *Namespace) OpenSession(ino, session, client uint64, now int64) error {
	return ns.write(func(b *pebble.Batch) error {
		in, err := loadInode(batchReader{b}, ino)
		if err != nil {
			return err
		}
		if in.Type != metapb.InodeType_FILE {
			return fmt.Errorf("write session on inode %d: %w", ino, ErrIsDir)
		}
		v := binary.BigEndian.AppendUint64(nil, client)
		return b.Set(sessionRecordKey(ino, session), binary.BigEndian.AppendUint64(v, uint64(now)), nil)
	})
}

// CloseSession ends a write session, setting the file's length when size
// is given (and the file still exists).
func (ns *Namespace) CloseSession(ino, session uint64, size *uint64, now int64) error {
	return ns.write(func(b *pebble.Batch) error {
		if err := b.Delete(sessionRecordKey(ino, session), nil); err != nil {
			return err
		}
		if size == nil {
			return nil
		}
		in, err := loadInode(batchReader{b}, ino)
		if err != nil {
			return nil // unlinked meanwhile: its chunks are the collector's
		}
		in.Size, in.MtimeNs, in.CtimeNs = *size, now, now
		return putInode(b, in)
	})
}

// PruneClient ends every write session of client.
func (ns *Namespace) PruneClient(client uint64) error {
	return ns.write(func(b *pebble.Batch) error {
		it, err := b.NewIter(&pebble.IterOptions{LowerBound: []byte{'w'}, UpperBound: []byte{'x'}})
		if err != nil {
			return err
		}
		defer it.Close()
		var dead [][]byte
		for it.First(); it.Valid(); it.Next() {
			if v := it.Value(); len(v) == 16 && binary.BigEndian.Uint64(v) == client {
				dead = append(dead, append([]byte(nil), it.Key()...))
			}
		}
		for _, k := range dead {
			if err := b.Delete(k, nil); err != nil {
				return err
			}
		}
		return it.Error()
	})
}

// HasSessions reports whether any write session on ino is open.
func (ns *Namespace) HasSessions(ino uint64) (bool, error) {
	lo := binary.BigEndian.AppendUint64([]byte{'w'}, ino)
	hi := binary.BigEndian.AppendUint64([]byte{'w'}, ino+1)
	it, err := ns.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return it.First(), it.Error()
}
