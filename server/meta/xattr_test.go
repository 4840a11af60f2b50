package meta

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// TestMknod: special files keep their type, mode and (devices) rdev, link
// and unlink like files, and leave nothing for the collector.
func TestMknod(t *testing.T) {
	ns := newNS(t)
	cases := []struct {
		name     string
		typ      metapb.InodeType
		rdev     uint32
		wantRdev uint32
	}{
		{"fifo", metapb.InodeType_FIFO, 7, 0},
		{"chr", metapb.InodeType_CHAR_DEVICE, 0x0103, 0x0103},
		{"blk", metapb.InodeType_BLOCK_DEVICE, 0x0801, 0x0801},
		{"sock", metapb.InodeType_SOCKET, 0, 0},
		{"file", metapb.InodeType_FILE, 0, 0},
	}
	for _, tc := range cases {
		in, err := ns.Mknod(RootIno, tc.name, tc.typ, tc.rdev, at)
		if err != nil || in.Type != tc.typ || in.Rdev != tc.wantRdev || in.Mode != at.Mode {
			t.Fatalf("mknod %s: %v, %v", tc.name, in, err)
		}
		if got := must(ns.Lookup(RootIno, tc.name))(t); got.Type != tc.typ || got.Rdev != tc.wantRdev {
			t.Fatalf("lookup %s: %v", tc.name, got)
		}
	}
	if _, err := ns.Mknod(RootIno, "fifo", metapb.InodeType_FIFO, 0, at); !errors.Is(err, fsmeta.ErrExist) {
		t.Fatalf("mknod over a name: %v", err)
	}
	if _, err := ns.Mknod(RootIno, "d", metapb.InodeType_DIRECTORY, 0, at); !errors.Is(err, fsmeta.ErrInvalidName) {
		t.Fatalf("mknod of a directory: %v", err)
	}
	fifo := must(ns.Lookup(RootIno, "fifo"))(t)
	if _, err := ns.Link(fifo.Ino, RootIno, "fifo2", 3000); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fifo", "fifo2", "chr", "blk", "sock"} {
		if err := ns.Unlink(RootIno, name, 3000); err != nil {
			t.Fatal(err)
		}
	}
	if q := must(ns.Garbage(10))(t); len(q) != 0 {
		t.Fatalf("special files queued for the collector: %v", q)
	}
}

// TestXattrs: set, get, list and remove, the create and replace flags, the
// limits, and attributes going with their inode.
func TestXattrs(t *testing.T) {
	ns := newNS(t)
	f := must(ns.Create(RootIno, "f", at))(t)
	if err := ns.SetXattr(f.Ino, "user.b", []byte("two"), 0, 3000); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXattr(f.Ino, "user.a", nil, 0, 3000); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.GetXattr(f.Ino, "user.a"); err != nil || len(v) != 0 {
		t.Fatalf("an empty value: %q, %v", v, err)
	}
	if names := must(ns.ListXattr(f.Ino))(t); !slices.Equal(names, []string{"user.a", "user.b"}) {
		t.Fatalf("list: %v", names)
	}
	if in := must(ns.Stat(f.Ino))(t); in.CtimeNs != 3000 {
		t.Fatalf("ctime %d after setxattr, want 3000", in.CtimeNs)
	}
	big := bytes.Repeat([]byte("v"), fsmeta.MaxXattrValue)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"create over an existing one", ns.SetXattr(f.Ino, "user.b", nil, fsmeta.XattrCreate, 4000), fsmeta.ErrExist},
		{"replace a missing one", ns.SetXattr(f.Ino, "user.c", nil, fsmeta.XattrReplace, 4000), fsmeta.ErrNoXattr},
		{"both flags", ns.SetXattr(f.Ino, "user.c", nil, fsmeta.XattrCreate|fsmeta.XattrReplace, 4000), fsmeta.ErrInvalidName},
		{"value of 64 KiB + 1", ns.SetXattr(f.Ino, "user.c", append(big, 'x'), 0, 4000), fsmeta.ErrXattrTooBig},
		{"name of 256 bytes", ns.SetXattr(f.Ino, "user."+strings.Repeat("n", 251), nil, 0, 4000), fsmeta.ErrXattrRange},
		{"empty name", ns.SetXattr(f.Ino, "", nil, 0, 4000), fsmeta.ErrXattrRange},
		{"unknown namespace", ns.SetXattr(f.Ino, "os2.x", nil, 0, 4000), fsmeta.ErrNotSupported},
		{"system namespace", ns.SetXattr(f.Ino, "system.posix_acl_access", nil, 0, 4000), fsmeta.ErrNotSupported},
		{"a prefix alone", ns.SetXattr(f.Ino, "user.", nil, 0, 4000), fsmeta.ErrNotSupported},
		{"get a missing one", func() error { _, err := ns.GetXattr(f.Ino, "user.zz"); return err }(), fsmeta.ErrNoXattr},
		{"remove a missing one", ns.RemoveXattr(f.Ino, "user.zz", 4000), fsmeta.ErrNoXattr},
		{"set on a missing inode", ns.SetXattr(999, "user.a", nil, 0, 4000), fsmeta.ErrStale},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := ns.SetXattr(f.Ino, "user.b", big, fsmeta.XattrReplace, 5000); err != nil {
		t.Fatalf("replace with a 64 KiB value: %v", err)
	}
	if v := must(ns.GetXattr(f.Ino, "user.b"))(t); !bytes.Equal(v, big) {
		t.Fatalf("value of %d bytes back", len(v))
	}
	if err := ns.RemoveXattr(f.Ino, "user.a", 6000); err != nil {
		t.Fatal(err)
	}
	if names := must(ns.ListXattr(f.Ino))(t); !slices.Equal(names, []string{"user.b"}) {
		t.Fatalf("list after remove: %v", names)
	}
	// The list of names is bounded too.
	g := must(ns.Create(RootIno, "g", at))(t)
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		err = ns.SetXattr(g.Ino, "user."+strings.Repeat("n", 200)+string(rune('a'+i%26))+strings.Repeat("x", i/26), nil, 0, 7000)
	}
	if !errors.Is(err, fsmeta.ErrXattrTooBig) {
		t.Fatalf("names past 64 KiB: %v", err)
	}
	// Unlinking the last name drops the attributes.
	if err := ns.Unlink(RootIno, "f", 8000); err != nil {
		t.Fatal(err)
	}
	f2 := must(ns.Create(RootIno, "f", at))(t)
	if names := must(ns.ListXattr(f2.Ino))(t); len(names) != 0 {
		t.Fatalf("a new file has attributes %v", names)
	}
	if left := countPrefix(t, ns, xattrKey(f.Ino, "")); left != 0 {
		t.Fatalf("%d attribute records left of an unlinked file", left)
	}
}

func countPrefix(t *testing.T, ns *Namespace, prefix []byte) int {
	it, err := ns.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.SeekGE(prefix); it.Valid() && bytes.HasPrefix(it.Key(), prefix); it.Next() {
		n++
	}
	return n
}
