package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/metapb"
)

// Write sessions: a client that opens a file for writing records a session
// ("w" + inode + session -> client, opened at); closing it (or fsync) sets
// the file's length; the sessions of a client that died are pruned. The
// chunk collector leaves a file alone while any session on it is open.

// sessionRecordKey names a session by file, client and the client's own
// session number, so two clients' numbers never collide.
func sessionRecordKey(ino, client, session uint64) []byte {
	k := binary.BigEndian.AppendUint64([]byte{'w'}, ino)
	k = binary.BigEndian.AppendUint64(k, client)
	return binary.BigEndian.AppendUint64(k, session)
}

// OpenSession records a write session on file ino.
func (ns *Namespace) OpenSession(ino, client, session uint64, now int64) error {
	return ns.write(func(b *pebble.Batch) error {
		in, err := loadInode(batchReader{b}, ino)
		if err != nil {
			return err
		}
		if in.Type != metapb.InodeType_FILE {
			return fmt.Errorf("write session on inode %d: %w", ino, fsmeta.ErrIsDir)
		}
		return putSession(b, ino, Writer{Client: client, Session: session}, now)
	})
}

// EndSession ends a write session with nothing to publish (none when it
// is not open).
func (ns *Namespace) EndSession(ino, client, session uint64) error {
	return ns.write(func(b *pebble.Batch) error { return b.Delete(sessionRecordKey(ino, client, session), nil) })
}

// putSession records write session w on file ino, opened at now; nothing
// when w names none.
func putSession(b *pebble.Batch, ino uint64, w Writer, now int64) error {
	if w.Session == 0 {
		return nil
	}
	v := binary.BigEndian.AppendUint64(nil, w.Client)
	return b.Set(sessionRecordKey(ino, w.Client, w.Session), binary.BigEndian.AppendUint64(v, uint64(now)), nil)
}

// CloseSession ends a write session, or with keep (fsync) only sets the
// length. A given size extends the file's length to it (never shrinks it:
// another writer may have written further; shrinking is Setattr's), and
// written (the end of what the session wrote; size when absent, as from
// older clients) raises the file's written mark. With keep, written and no
// size, it only raises the mark: a writer reserving room before it writes
// past the mark (sdk), so that the mark bounds its chunks even if it dies
// before it closes. If the file was unlinked meanwhile, both go to its
// collector record, so all of its chunks get collected.
func (ns *Namespace) CloseSession(ino, client, session uint64, size, written *uint64, keep bool, now int64) error {
	return ns.write(func(b *pebble.Batch) error {
		if !keep {
			if err := b.Delete(sessionRecordKey(ino, client, session), nil); err != nil {
				return err
			}
		}
		if size == nil && written == nil {
			return nil
		}
		if written == nil {
			written = size
		}
		if size != nil && *written > 0 {
			// The session's bytes are in chunks: any inline content was
			// moved there first (sdk), and ends here.
			if err := endContent(b, ino); err != nil {
				return err
			}
		}
		return updateFile(b, ino, size, func(*metapb.Inode) uint64 { return *written }, now)
	})
}

// updateFile extends file ino's length to *size (when given, with its
// times) and raises its written mark to mark(file), in its inode or, for a
// file unlinked meanwhile, in its collector record.
func updateFile(b *pebble.Batch, ino uint64, size *uint64, mark func(*metapb.Inode) uint64, now int64) error {
	in, err := loadInode(batchReader{b}, ino)
	if err == nil {
		if size != nil {
			in.Size, in.MtimeNs, in.CtimeNs = max(in.Size, *size), now, now
		}
		raiseWritten(in, mark(in))
		if in.Nlink == 0 { // a file with no name (CreateTemp): its collector record follows
			if err := queue(b, in); err != nil {
				return err
			}
		}
		return putInode(b, in)
	}
	v, err := get(batchReader{b}, gcKey(ino))
	if err != nil || v == nil {
		return err
	}
	rec := &metapb.Inode{}
	if err := proto.Unmarshal(v, rec); err != nil {
		return err
	}
	if size != nil {
		rec.Size = max(rec.Size, *size)
	}
	raiseWritten(rec, mark(rec))
	nv, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Set(gcKey(ino), nv, nil)
}

// PruneClient ends every write session of client, a client taken for
// dead. Each file it held gets a written mark of at least one chunk: a
// writer reserves room in the mark before it writes past it (sdk), all but
// the first chunk, which its session covers; so the mark bounds what the
// dead writer may have stored, and the collector removes all of it.
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
		if err := it.Error(); err != nil {
			return err
		}
		firstChunk := func(f *metapb.Inode) uint64 { return uint64(f.GetLayout().GetChunkSize()) }
		for _, k := range dead {
			if err := b.Delete(k, nil); err != nil {
				return err
			}
			if err := updateFile(b, binary.BigEndian.Uint64(k[1:9]), nil, firstChunk, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// HasSessions reports whether any write session on ino is open.
func (ns *Namespace) HasSessions(ino uint64) (bool, error) { return sessionsOn(ns.db, ino, nil) }

// sessionsOn reports whether r (the database or a batch) holds a write
// session on ino other than the one whose record key is except.
func sessionsOn(r interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}, ino uint64, except []byte) (bool, error) {
	lo := binary.BigEndian.AppendUint64([]byte{'w'}, ino)
	hi := binary.BigEndian.AppendUint64([]byte{'w'}, ino+1)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if !bytes.Equal(it.Key(), except) {
			return true, nil
		}
	}
	return false, it.Error()
}

// SessionClients returns, for each client with write sessions open, when
// the newest of them was opened (the command's time, in ns).
func (ns *Namespace) SessionClients() (map[uint64]int64, error) {
	it, err := ns.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'w'}, UpperBound: []byte{'x'}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[uint64]int64{}
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		if len(v) != 16 {
			continue
		}
		client, opened := binary.BigEndian.Uint64(v), int64(binary.BigEndian.Uint64(v[8:]))
		if t, ok := out[client]; !ok || opened > t {
			out[client] = opened
		}
	}
	return out, it.Error()
}
