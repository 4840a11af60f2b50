package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/fsmeta"
)

// Extended attributes: "x" + inode + name -> 0, value (the leading byte
// tells an empty value from none). They go with their inode (dropXattrs);
// fsmeta.CheckXattr says which names and sizes are taken.

func xattrKey(ino uint64, name string) []byte {
	return append(binary.BigEndian.AppendUint64([]byte{'x'}, ino), name...)
}

// xattrNames returns ino's attribute names in name order.
func xattrNames(it *pebble.Iterator, ino uint64) ([]string, error) {
	prefix := len(xattrKey(ino, ""))
	var out []string
	for it.First(); it.Valid(); it.Next() {
		out = append(out, string(it.Key()[prefix:]))
	}
	return out, it.Error()
}

func xattrBounds(ino uint64) *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: xattrKey(ino, ""), UpperBound: xattrKey(ino+1, "")}
}

func dropXattrs(b *pebble.Batch, ino uint64) error {
	return b.DeleteRange(xattrKey(ino, ""), xattrKey(ino+1, ""), nil)
}

// SetXattr sets attribute name of inode ino to value. With
// fsmeta.XattrCreate it fails with ErrExist if the attribute exists, with
// fsmeta.XattrReplace with ErrNoXattr if it does not; a new name that
// would make the inode's list longer than fsmeta.MaxXattrList is refused
// with ErrXattrTooBig. It changes the inode's ctime.
func (ns *Namespace) SetXattr(ino uint64, name string, value []byte, flags uint32, now int64) error {
	if err := fsmeta.CheckXattr(name, value, flags); err != nil {
		return err
	}
	return ns.changeXattr(ino, now, func(b *pebble.Batch, r reader) error {
		old, err := get(r, xattrKey(ino, name))
		if err != nil {
			return err
		}
		switch {
		case old != nil && flags&fsmeta.XattrCreate != 0:
			return fmt.Errorf("extended attribute %q of inode %d: %w", name, ino, fsmeta.ErrExist)
		case old == nil && flags&fsmeta.XattrReplace != 0:
			return fmt.Errorf("extended attribute %q of inode %d: %w", name, ino, fsmeta.ErrNoXattr)
		case old == nil:
			it, err := b.NewIter(xattrBounds(ino))
			if err != nil {
				return err
			}
			names, err := xattrNames(it, ino)
			it.Close()
			if err != nil {
				return err
			}
			list := len(name) + 1
			for _, n := range names {
				list += len(n) + 1
			}
			if list > fsmeta.MaxXattrList {
				return fmt.Errorf("%w: the names of inode %d would take %d bytes, limit %d", fsmeta.ErrXattrTooBig, ino, list, fsmeta.MaxXattrList)
			}
		}
		return b.Set(xattrKey(ino, name), append([]byte{0}, value...), nil)
	})
}

// changeXattr runs fn, which changes an attribute of inode ino, in a batch
// that also sets the inode's ctime.
func (ns *Namespace) changeXattr(ino uint64, now int64, fn func(b *pebble.Batch, r reader) error) error {
	return ns.write(func(b *pebble.Batch) error {
		r := batchReader{b}
		in, err := loadInode(r, ino)
		if err != nil {
			return err
		}
		if err := fn(b, r); err != nil {
			return err
		}
		in.CtimeNs = now
		return putInode(b, in)
	})
}

// RemoveXattr removes attribute name of inode ino (ErrNoXattr if it has
// none of that name). It changes the inode's ctime.
func (ns *Namespace) RemoveXattr(ino uint64, name string, now int64) error {
	if err := fsmeta.CheckXattrName(name); err != nil {
		return err
	}
	return ns.changeXattr(ino, now, func(b *pebble.Batch, r reader) error {
		if v, err := get(r, xattrKey(ino, name)); err != nil {
			return err
		} else if v == nil {
			return fmt.Errorf("extended attribute %q of inode %d: %w", name, ino, fsmeta.ErrNoXattr)
		}
		return b.Delete(xattrKey(ino, name), nil)
	})
}

// GetXattr returns attribute name of inode ino (ErrNoXattr if it has none
// of that name).
func (ns *Namespace) GetXattr(ino uint64, name string) ([]byte, error) {
	if err := fsmeta.CheckXattrName(name); err != nil {
		return nil, err
	}
	r := dbReader{ns.db}
	if _, err := loadInode(r, ino); err != nil {
		return nil, err
	}
	v, err := get(r, xattrKey(ino, name))
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("extended attribute %q of inode %d: %w", name, ino, fsmeta.ErrNoXattr)
	}
	return v[1:], nil
}

// ListXattr returns the names of inode ino's attributes, in name order.
func (ns *Namespace) ListXattr(ino uint64) ([]string, error) {
	if _, err := loadInode(dbReader{ns.db}, ino); err != nil {
		return nil, err
	}
	it, err := ns.db.NewIter(xattrBounds(ino))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	return xattrNames(it, ino)
}
