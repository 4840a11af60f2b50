package meta

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/proto/metapb"
)

var rootLayout = &metapb.Layout{ChainTable: 1, ChunkSize: 1 << 20, Stripe: 4}

func openNS(t *testing.T, dir string) (*Namespace, *pebble.DB) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := Open(db, rootLayout, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return ns, db
}

func newNS(t *testing.T) *Namespace {
	ns, db := openNS(t, t.TempDir())
	t.Cleanup(func() { db.Close() })
	return ns
}

var at = Attrs{Mode: 0o644, UID: 10, GID: 20, Now: 2000}

// must(f())(t) is f's value, failing t on f's error.
// wrote gives file ino a written mark of n, as a writer's close does.
func wrote(t *testing.T, ns *Namespace, ino, n uint64) {
	t.Helper()
	if err := ns.OpenSession(ino, 99, ino, 1000); err != nil {
		t.Fatal(err)
	}
	if err := ns.CloseSession(ino, 99, ino, &n, &n, false, 1000); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestMakeAndLookup(t *testing.T) {
	ns := newNS(t)
	d := must(ns.Mkdir(RootIno, "data", Attrs{Mode: 0o755, Now: 3000}))(t)
	f := must(ns.Create(d.Ino, "a.bin", at))(t)
	if f.Type != metapb.InodeType_FILE || f.Uid != 10 || f.Gid != 20 || f.Mode != 0o644 || f.Nlink != 1 || f.MtimeNs != 2000 {
		t.Fatalf("file %v", f)
	}
	if f.Layout.GetChunkSize() != 1<<20 || f.Layout.GetStripe() != 4 {
		t.Fatalf("layout not inherited: %v", f.Layout)
	}
	if got := must(ns.Lookup(d.Ino, "a.bin"))(t); got.Ino != f.Ino {
		t.Fatalf("lookup: %v", got)
	}
	if got := must(ns.Resolve("/data/a.bin"))(t); got.Ino != f.Ino {
		t.Fatalf("resolve: %v", got)
	}
	root := must(ns.Stat(RootIno))(t)
	dd := must(ns.Stat(d.Ino))(t)
	if root.Nlink != 3 || dd.Nlink != 2 || dd.Parent != RootIno || dd.MtimeNs != 2000 {
		t.Fatalf("root nlink %d, dir %v", root.Nlink, dd)
	}
	if bs := must(ns.BatchStat([]uint64{f.Ino, 424242, d.Ino}))(t); bs[0].GetIno() != f.Ino || bs[1] != nil || bs[2].GetIno() != d.Ino {
		t.Fatalf("batch stat: %v", bs)
	}
	s := must(ns.Symlink(d.Ino, "link", "../elsewhere", at))(t)
	if got := must(ns.Resolve("/data/link"))(t); got.Type != metapb.InodeType_SYMLINK || got.Target != "../elsewhere" || s.Size != 12 {
		t.Fatalf("symlink %v", got)
	}
}

func TestErrors(t *testing.T) {
	ns := newNS(t)
	d := must(ns.Mkdir(RootIno, "d", at))(t)
	f := must(ns.Create(d.Ino, "f", at))(t)
	sub := must(ns.Mkdir(d.Ino, "sub", at))(t)
	must(ns.Create(sub.Ino, "inner", at))(t)
	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"create existing", func() error { _, err := ns.Create(d.Ino, "f", at); return err }, fsmeta.ErrExist},
		{"mkdir existing", func() error { _, err := ns.Mkdir(d.Ino, "sub", at); return err }, fsmeta.ErrExist},
		{"lookup missing", func() error { _, err := ns.Lookup(d.Ino, "nope"); return err }, fsmeta.ErrNotFound},
		{"create in a file", func() error { _, err := ns.Create(f.Ino, "x", at); return err }, fsmeta.ErrNotDir},
		{"stale inode", func() error { _, err := ns.Stat(9999); return err }, fsmeta.ErrStale},
		{"name with slash", func() error { _, err := ns.Create(d.Ino, "a/b", at); return err }, fsmeta.ErrInvalidName},
		{"name with NUL", func() error { _, err := ns.Create(d.Ino, "a\x00b", at); return err }, fsmeta.ErrInvalidName},
		{"dot", func() error { _, err := ns.Mkdir(d.Ino, ".", at); return err }, fsmeta.ErrInvalidName},
		{"dot dot", func() error { _, err := ns.Mkdir(d.Ino, "..", at); return err }, fsmeta.ErrInvalidName},
		{"empty name", func() error { _, err := ns.Create(d.Ino, "", at); return err }, fsmeta.ErrInvalidName},
		{"256-byte name", func() error { _, err := ns.Create(d.Ino, strings.Repeat("x", 256), at); return err }, fsmeta.ErrNameTooLong},
		{"long path", func() error { _, err := ns.Resolve("/" + strings.Repeat("a/", 2100)); return err }, fsmeta.ErrNameTooLong},
		{"relative path", func() error { _, err := ns.Resolve("d/f"); return err }, fsmeta.ErrInvalidName},
		{"unlink a directory", func() error { return ns.Unlink(d.Ino, "sub", 1) }, fsmeta.ErrIsDir},
		{"rmdir a file", func() error { return ns.Rmdir(d.Ino, "f", 1) }, fsmeta.ErrNotDir},
		{"rmdir non-empty", func() error { return ns.Rmdir(d.Ino, "sub", 1) }, fsmeta.ErrNotEmpty},
		{"unlink missing", func() error { return ns.Unlink(d.Ino, "nope", 1) }, fsmeta.ErrNotFound},
		{"hard link a directory", func() error { _, err := ns.Link(sub.Ino, RootIno, "l", 1); return err }, fsmeta.ErrIsDir},
		{"link over existing", func() error { _, err := ns.Link(f.Ino, d.Ino, "sub", 1); return err }, fsmeta.ErrExist},
		{"truncate a directory", func() error {
			n := uint64(0)
			_, err := ns.Setattr(d.Ino, SetAttr{Size: &n}, 1)
			return err
		}, fsmeta.ErrIsDir},
		{"move a directory into itself", func() error { return ns.Rename(RootIno, "d", sub.Ino, "d2", 1) }, fsmeta.ErrLoop},
		{"move a directory onto itself below", func() error { return ns.Rename(d.Ino, "sub", sub.Ino, "x", 1) }, fsmeta.ErrLoop},
		{"directory over a file", func() error { return ns.Rename(d.Ino, "sub", d.Ino, "f", 1) }, fsmeta.ErrNotDir},
		{"file over a directory", func() error { return ns.Rename(d.Ino, "f", d.Ino, "sub", 1) }, fsmeta.ErrIsDir},
		{"rename missing", func() error { return ns.Rename(d.Ino, "nope", d.Ino, "x", 1) }, fsmeta.ErrNotFound},
		{"rename to a bad name", func() error { return ns.Rename(d.Ino, "f", d.Ino, "..", 1) }, fsmeta.ErrInvalidName},
		{"rename without replacing, over a directory", func() error { return ns.RenameNoReplace(d.Ino, "f", d.Ino, "sub", 1) }, fsmeta.ErrExist},
		{"rename without replacing, onto itself", func() error { return ns.RenameNoReplace(d.Ino, "f", d.Ino, "f", 1) }, fsmeta.ErrExist},
		{"rename without replacing, from nothing", func() error { return ns.RenameNoReplace(d.Ino, "nope", d.Ino, "x", 1) }, fsmeta.ErrNotFound},
	}
	for _, c := range cases {
		if err := c.op(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// None of that changed anything.
	if got := must(ns.Resolve("/d/sub/inner"))(t); got.Type != metapb.InodeType_FILE {
		t.Fatal("tree changed by refused operations")
	}
	if n := must(ns.Statfs())(t).Inodes; n != 5 {
		t.Fatalf("%d inodes, want 5", n)
	}
}

func TestListPages(t *testing.T) {
	ns := newNS(t)
	d := must(ns.Mkdir(RootIno, "d", at))(t)
	for i := 0; i < 25; i++ {
		must(ns.Create(d.Ino, fmt.Sprintf("f%02d", i), at))(t)
	}
	other := must(ns.Mkdir(RootIno, "e", at))(t)
	must(ns.Create(other.Ino, "elsewhere", at))(t)
	var names []string
	after := ""
	pages := 0
	for {
		ents, more, err := ns.List(d.Ino, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range ents {
			names = append(names, e.Name)
		}
		if !more {
			break
		}
		after = ents[len(ents)-1].Name
	}
	if len(names) != 25 || pages != 3 || names[0] != "f00" || names[24] != "f24" {
		t.Fatalf("%d names in %d pages: %v", len(names), pages, names)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("not in order: %v", names)
		}
	}
}

func TestRename(t *testing.T) {
	ns := newNS(t)
	a := must(ns.Mkdir(RootIno, "a", at))(t)
	b := must(ns.Mkdir(RootIno, "b", at))(t)
	f := must(ns.Create(a.Ino, "f", at))(t)
	// Within a directory, then across, replacing a file (whose inode goes
	// to the collector).
	if err := ns.Rename(a.Ino, "f", a.Ino, "g", 5000); err != nil {
		t.Fatal(err)
	}
	victim := must(ns.Create(b.Ino, "h", at))(t)
	wrote(t, ns, victim.Ino, 10) // a file that never stored a byte leaves nothing to collect
	if err := ns.Rename(a.Ino, "g", b.Ino, "h", 6000); err != nil {
		t.Fatal(err)
	}
	if got := must(ns.Resolve("/b/h"))(t); got.Ino != f.Ino {
		t.Fatalf("/b/h is %d, want %d", got.Ino, f.Ino)
	}
	if _, err := ns.Resolve("/a/g"); !errors.Is(err, fsmeta.ErrNotFound) {
		t.Fatalf("old name still there: %v", err)
	}
	if _, err := ns.Stat(victim.Ino); !errors.Is(err, fsmeta.ErrStale) {
		t.Fatalf("replaced file still has an inode: %v", err)
	}
	if g := must(ns.Garbage(10))(t); len(g) != 1 || g[0].Ino != victim.Ino {
		t.Fatalf("collector queue %v", g)
	}
	// A directory moves with its subtree; link counts follow.
	sub := must(ns.Mkdir(a.Ino, "sub", at))(t)
	must(ns.Create(sub.Ino, "deep", at))(t)
	empty := must(ns.Mkdir(b.Ino, "empty", at))(t)
	if err := ns.Rename(a.Ino, "sub", b.Ino, "empty", 7000); err != nil {
		t.Fatalf("directory over an empty directory: %v", err)
	}
	if _, err := ns.Stat(empty.Ino); !errors.Is(err, fsmeta.ErrStale) {
		t.Fatal("replaced directory kept its inode")
	}
	moved := must(ns.Resolve("/b/empty/deep"))(t)
	if moved.Type != metapb.InodeType_FILE {
		t.Fatal("subtree did not move")
	}
	if s := must(ns.Stat(sub.Ino))(t); s.Parent != b.Ino {
		t.Fatalf("moved directory's parent %d, want %d", s.Parent, b.Ino)
	}
	if na, nb := must(ns.Stat(a.Ino))(t).Nlink, must(ns.Stat(b.Ino))(t).Nlink; na != 2 || nb != 3 {
		t.Fatalf("link counts a=%d b=%d, want 2 and 3", na, nb)
	}
	// Onto a non-empty directory: refused.
	full := must(ns.Mkdir(RootIno, "full", at))(t)
	must(ns.Create(full.Ino, "x", at))(t)
	if err := ns.Rename(b.Ino, "empty", RootIno, "full", 8000); !errors.Is(err, fsmeta.ErrNotEmpty) {
		t.Fatalf("directory over a non-empty one: %v", err)
	}
}

func TestLinksAndUnlink(t *testing.T) {
	ns := newNS(t)
	f := must(ns.Create(RootIno, "f", at))(t)
	wrote(t, ns, f.Ino, 10)
	l := must(ns.Link(f.Ino, RootIno, "g", 3000))(t)
	if l.Nlink != 2 {
		t.Fatalf("nlink %d after link", l.Nlink)
	}
	if err := ns.Rename(RootIno, "f", RootIno, "g", 3500); err != nil {
		t.Fatalf("rename onto another name of the same file: %v", err)
	}
	if err := ns.Unlink(RootIno, "f", 4000); err != nil {
		t.Fatal(err)
	}
	if got := must(ns.Stat(f.Ino))(t); got.Nlink != 1 {
		t.Fatalf("nlink %d after one unlink", got.Nlink)
	}
	if g := must(ns.Garbage(10))(t); len(g) != 0 {
		t.Fatal("a file with a link left was queued for collection")
	}
	if err := ns.Unlink(RootIno, "g", 5000); err != nil {
		t.Fatal(err)
	}
	g := must(ns.Garbage(10))(t)
	if len(g) != 1 || g[0].Ino != f.Ino {
		t.Fatalf("collector queue %v", g)
	}
	if err := ns.Collected(f.Ino); err != nil {
		t.Fatal(err)
	}
	if g := must(ns.Garbage(10))(t); len(g) != 0 {
		t.Fatal("collected file still queued")
	}
}

func TestSetattrAndRestart(t *testing.T) {
	dir := t.TempDir()
	ns, db := openNS(t, dir)
	f := must(ns.Create(RootIno, "f", at))(t)
	mode, uid, size, mtime := uint32(0o100600), uint32(77), uint64(12345), int64(42)
	got := must(ns.Setattr(f.Ino, SetAttr{Mode: &mode, UID: &uid, Size: &size, Mtime: &mtime}, 9000))(t)
	if got.Mode != 0o600 || got.Uid != 77 || got.Gid != 20 || got.Size != 12345 || got.MtimeNs != 42 || got.CtimeNs != 9000 {
		t.Fatalf("after setattr: %v", got)
	}
	db.Close()
	ns, db = openNS(t, dir)
	defer db.Close()
	if got := must(ns.Resolve("/f"))(t); got.Size != 12345 || got.Uid != 77 {
		t.Fatalf("after restart: %v", got)
	}
	// The root is made once, not again at every open.
	if n := must(ns.Statfs())(t).Inodes; n != 2 {
		t.Fatalf("%d inodes after restart, want 2", n)
	}
}

// TestRenameNoReplace: without replacing, a rename to a free name is an
// ordinary rename, and one to a taken name changes neither name.
func TestRenameNoReplace(t *testing.T) {
	ns := newNS(t)
	f := must(ns.Create(RootIno, "f", at))(t)
	g := must(ns.Create(RootIno, "g", at))(t)
	if err := ns.RenameNoReplace(RootIno, "f", RootIno, "g", 2000); !errors.Is(err, fsmeta.ErrExist) {
		t.Fatalf("over g: %v", err)
	}
	if a, b := must(ns.Resolve("/f"))(t), must(ns.Resolve("/g"))(t); a.Ino != f.Ino || b.Ino != g.Ino {
		t.Fatalf("a refused rename moved names: /f=%d /g=%d", a.Ino, b.Ino)
	}
	if err := ns.RenameNoReplace(RootIno, "f", RootIno, "h", 3000); err != nil {
		t.Fatal(err)
	}
	if h := must(ns.Resolve("/h"))(t); h.Ino != f.Ino {
		t.Fatalf("/h is %d, want %d", h.Ino, f.Ino)
	}
	if _, err := ns.Resolve("/f"); !errors.Is(err, fsmeta.ErrNotFound) {
		t.Fatalf("/f after the rename: %v", err)
	}
}

// TestRootTimesAtFormat: the root directory's times are those of the
// first command the new group applies, not 1970.
func TestRootTimesAtFormat(t *testing.T) {
	r := soloReplica(t)
	before := time.Now().Add(-time.Minute).UnixNano()
	do(t, []*Replica{r}, &metapb.Command{Op: &metapb.Command_PruneClient{PruneClient: 99}})
	root, err := r.Namespace().Stat(RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if root.AtimeNs < before || root.MtimeNs != root.AtimeNs || root.CtimeNs != root.AtimeNs {
		t.Fatalf("root times %d %d %d, want one time within the last minute", root.AtimeNs, root.MtimeNs, root.CtimeNs)
	}
	later := root.AtimeNs + int64(time.Hour)
	if err := r.Namespace().StampRoot(later); err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Namespace().Stat(RootIno); again.MtimeNs != root.MtimeNs {
		t.Fatal("the root's times were stamped twice")
	}
}

// TestCreateTemp: a file made with no name is in the collector's queue
// from the start, with the length and written mark its writer closes
// with; a link takes it out; one never linked goes, inode and all, when
// collected.
func TestCreateTemp(t *testing.T) {
	ns := newNS(t)
	d := must(ns.Mkdir(RootIno, "d", at))(t)
	linked := must(ns.CreateTemp(d.Ino, at, Writer{}))(t)
	lost := must(ns.CreateTemp(d.Ino, at, Writer{}))(t)
	if linked.Nlink != 0 || linked.Type != metapb.InodeType_FILE || ChunksOf(linked) != 0 {
		t.Fatalf("a file with no name: %v", linked)
	}
	if names, _, _ := ns.List(d.Ino, "", 10); len(names) != 0 {
		t.Fatalf("the directory lists %v", names)
	}
	size := uint64(3 << 20)
	for _, f := range []*metapb.Inode{linked, lost} {
		if err := ns.OpenSession(f.Ino, 1, f.Ino, 3000); err != nil {
			t.Fatal(err)
		}
		if err := ns.CloseSession(f.Ino, 1, f.Ino, &size, &size, false, 4000); err != nil {
			t.Fatal(err)
		}
	}
	q := must(ns.Garbage(10))(t)
	if len(q) != 2 || ChunksOf(q[0]) != 3 || ChunksOf(q[1]) != 3 || q[0].CtimeNs != 4000 {
		t.Fatalf("queue %v; want both files, 3 chunks each, from their close", q)
	}
	if _, err := ns.Link(linked.Ino, d.Ino, "named", 5000); err != nil {
		t.Fatal(err)
	}
	if q := must(ns.Garbage(10))(t); len(q) != 1 || q[0].Ino != lost.Ino {
		t.Fatalf("queue after the link: %v", q)
	}
	if err := ns.Collected(lost.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Stat(lost.Ino); !errors.Is(err, fsmeta.ErrStale) {
		t.Fatalf("the collected file's inode: %v", err)
	}
	if in := must(ns.Lookup(d.Ino, "named"))(t); in.Ino != linked.Ino || in.Nlink != 1 || in.Size != size {
		t.Fatalf("the linked file: %v", in)
	}
}
