package meta

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Inline files: a small file's whole content kept in the metadata store
// ("c" + inode -> its bytes), written by the close that ends its writer's
// session, so that creating, writing and closing it costs two commands of
// the log and nothing on storage. Its inode says how many bytes
// (Inode.inline); the file reads as them, then zeros up to its length, and
// never from chunks: a chunk below its written mark (a writer that died
// while moving the bytes to chunks) is garbage, which the collector
// removes with the file. A writer that outgrows the limit, or finds
// another writer on the file, stores the bytes in chunks instead, and its
// close (with a written mark) ends the inline content.

func contentKey(ino uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'c'}, ino) }

// DefaultInlineMax is the largest file the metadata service keeps inline
// unless configured otherwise: a page.
const DefaultInlineMax = 4096

// Content returns file ino's inode and, when it is inline, its bytes, as
// of one moment.
func (ns *Namespace) Content(ino uint64) (*metapb.Inode, []byte, error) {
	snap := ns.db.NewSnapshot()
	defer snap.Close()
	r := snapReader{snap}
	in, err := loadInode(r, ino)
	if err != nil || in.Inline == 0 {
		return in, nil, err
	}
	data, err := get(r, contentKey(ino))
	if err != nil {
		return nil, nil, err
	}
	if len(data) != int(in.Inline) {
		return nil, nil, fmt.Errorf("inode %d: %d inline bytes stored, its inode says %d", ino, len(data), in.Inline)
	}
	return in, data, nil
}

type snapReader struct{ s *pebble.Snapshot }

func (r snapReader) Get(k []byte) ([]byte, interface{ Close() error }, error) {
	v, c, err := r.s.Get(k)
	return v, c, err
}

// CloseInline ends (or with keep, as fsync, keeps) a write session whose
// writer held the file's whole content: data, and size its length. It is
// refused (ErrNotInline) while another session is open on the file: the
// writer then stores its bytes in chunks and closes as others do.
func (ns *Namespace) CloseInline(ino, client, session uint64, data []byte, size uint64, keep bool, now int64) error {
	if uint64(len(data)) > size {
		return fmt.Errorf("close inode %d: %d inline bytes past its length %d: %w", ino, len(data), size, fsmeta.ErrNotInline)
	}
	return ns.write(func(b *pebble.Batch) error {
		in, err := loadInode(batchReader{b}, ino)
		if errors.Is(err, fsmeta.ErrStale) {
			// Unlinked while open: nothing can open it again, so its
			// content goes nowhere; the session ends.
			if keep {
				return nil
			}
			return b.Delete(sessionRecordKey(ino, client, session), nil)
		}
		if err != nil {
			return err
		}
		if in.Type != metapb.InodeType_FILE {
			return fmt.Errorf("close inode %d: %w", ino, fsmeta.ErrIsDir)
		}
		if others, err := sessionsOn(b, ino, sessionRecordKey(ino, client, session)); err != nil {
			return err
		} else if others {
			return fmt.Errorf("close inode %d inline: another writer has it open: %w", ino, fsmeta.ErrNotInline)
		}
		if !keep {
			if err := b.Delete(sessionRecordKey(ino, client, session), nil); err != nil {
				return err
			}
		}
		if err := setContent(b, in, data); err != nil {
			return err
		}
		in.Size, in.MtimeNs, in.CtimeNs = size, now, now
		return putInode(b, in)
	})
}

// setContent makes data file in's inline content (none when empty); the
// caller saves in.
func setContent(b *pebble.Batch, in *metapb.Inode, data []byte) error {
	in.Inline = uint32(len(data))
	if len(data) == 0 {
		return b.Delete(contentKey(in.Ino), nil)
	}
	return b.Set(contentKey(in.Ino), data, nil)
}

// cutContent shortens file in's inline content to size, for a truncate;
// the caller saves in.
func cutContent(b *pebble.Batch, in *metapb.Inode, size uint64) error {
	if uint64(in.Inline) <= size {
		return nil
	}
	data, err := get(batchReader{b}, contentKey(in.Ino))
	if err != nil {
		return err
	}
	return setContent(b, in, data[:min(uint64(len(data)), size)])
}

// endContent ends file ino's inline content, if it has any (a file
// unlinked meanwhile has none: its content went with its inode).
func endContent(b *pebble.Batch, ino uint64) error {
	in, err := loadInode(batchReader{b}, ino)
	if err != nil || in.Inline == 0 {
		return nil
	}
	if err := setContent(b, in, nil); err != nil {
		return err
	}
	return putInode(b, in)
}
