package fuse

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/sdk"
)

// TestNamesRules drives the name memory by hand, with entries a real
// cluster listed: when it lists, what it answers and for how long, and
// what a local change takes away.
func TestNamesRules(t *testing.T) {
	mt := mount(t, 64<<10)
	ctx := context.Background()
	d, err := mt.cl.MkdirAt(ctx, 1, "rules", sdk.Owner{Mode: 0o755})
	must(t, err)
	for i := range 4 {
		_, err := mt.cl.MknodAt(ctx, d.Ino(), fmt.Sprint("f", i), syscall.S_IFREG|0o644, 0, sdk.Owner{Mode: 0o644})
		must(t, err)
	}
	ents, _, err := mt.cl.ListAt(ctx, d.Ino(), "", "", 100)
	must(t, err)
	if len(ents) != 4 {
		t.Fatalf("listed %d entries, want 4", len(ents))
	}
	byName := map[string]*sdk.FileInfo{}
	for _, e := range ents {
		byName[e.Name()] = e.FileInfo()
	}

	n := newNames(time.Second, 500*time.Millisecond)
	t0 := time.Now()
	dir := d.Ino()
	for i := 1; i < minListMisses; i++ {
		if list, _ := n.missed(dir, t0); list {
			t.Fatalf("listing asked for after %d misses, want %d", i, minListMisses)
		}
	}
	list, gen := n.missed(dir, t0)
	if !list {
		t.Fatalf("no listing after %d misses", minListMisses)
	}
	if again, _ := n.missed(dir, t0); again {
		t.Fatal("a second listing asked for while one is on its way")
	}
	n.listed(dir, gen, t0, ents)

	fi, entryLeft, attrLeft := n.lookup(dir, "f1", t0.Add(100*time.Millisecond))
	if fi == nil || fi.Ino() != byName["f1"].Ino() {
		t.Fatalf("f1 not answered from the listing: %v", fi)
	}
	if entryLeft != 900*time.Millisecond || attrLeft != 400*time.Millisecond {
		t.Fatalf("timeouts left %v and %v, want what is left of 1s and 500ms from the listing", entryLeft, attrLeft)
	}
	if fi, _, _ := n.lookup(dir, "f1", t0.Add(500*time.Millisecond)); fi != nil {
		t.Fatal("f1 answered past the attribute timeout")
	}
	if fi, _, _ := n.lookup(dir, "missing", t0); fi != nil {
		t.Fatal("a name the listing lacks was answered")
	}

	// Local changes: an inode changed here, a name removed here, a name
	// made here.
	n.touched(byName["f2"].Ino())
	if fi, _, _ := n.lookup(dir, "f2", t0); fi != nil {
		t.Fatal("f2 answered after a local change to it")
	}
	n.removed(dir, "f3", t0)
	if fi, _, _ := n.lookup(dir, "f3", t0); fi != nil {
		t.Fatal("f3 answered after it was removed here")
	}
	if fi, _, _ := n.lookup(dir, "f0", t0); fi == nil {
		t.Fatal("f0 lost by changes to other names")
	}
	n.made(dir, "f3-again", byName["f3"], t0, false)
	if fi, _, _ := n.lookup(dir, "f3-again", t0); fi == nil || fi.Ino() != byName["f3"].Ino() {
		t.Fatal("a name made here is not answered")
	}

	// A listing that began before a local change to its directory is not
	// kept (it may hold a name removed here since).
	n2 := newNames(time.Second, time.Second)
	for range minListMisses - 1 {
		n2.missed(dir, t0)
	}
	_, gen = n2.missed(dir, t0)
	n2.removed(dir, "f0", t0) // unknown to n2: it forgets everything
	n2.listed(dir, gen, t0, ents)
	if fi, _, _ := n2.lookup(dir, "f0", t0); fi != nil {
		t.Fatal("a listing overtaken by a change of its directory was kept")
	}
	// The next listing is due after len/listCost misses, at least
	// minListMisses.
	for i := 1; i < minListMisses; i++ {
		if list, _ := n2.missed(dir, t0); list {
			t.Fatalf("relisted after %d misses", i)
		}
	}
	if list, _ := n2.missed(dir, t0); !list {
		t.Fatal("no second listing")
	}
}

// TestNamesThroughMount: stat-ing every file of a directory costs a
// listing, not a round trip each, and what this mount changes shows at
// once while what another client changes shows within the timeouts.
func TestNamesThroughMount(t *testing.T) {
	mt := mount(t, 64<<10)
	ctx := context.Background()
	at := func(p string) string { return filepath.Join(mt.dir, "d", p) }
	must(t, os.Mkdir(filepath.Join(mt.dir, "d"), 0o755))
	const files = 64
	for i := range files {
		f, err := mt.cl.Create(ctx, fmt.Sprintf("/d/f%d", i))
		must(t, err)
		_, err = f.WriteAt(make([]byte, i), 0)
		must(t, err)
		must(t, f.Close())
	}
	stats := mt.m.FS.Stats()
	for i := range files {
		st, err := os.Stat(at(fmt.Sprint("f", i)))
		must(t, err)
		if st.Size() != int64(i) {
			t.Fatalf("f%d: size %d, want %d", i, st.Size(), i)
		}
	}
	if stats.Listings.Load() != 1 || stats.NamesRemembered.Load() < files-minListMisses {
		t.Fatalf("%d listings and %d lookups answered from them, want 1 and at least %d",
			stats.Listings.Load(), stats.NamesRemembered.Load(), files-minListMisses)
	}

	// Changes through this mount show at once, whatever it remembers.
	must(t, os.Chmod(at("f1"), 0o600))
	must(t, os.WriteFile(at("f2"), make([]byte, 1000), 0o644))
	must(t, os.Remove(at("f3")))
	must(t, os.Link(at("f4"), at("g4")))
	must(t, os.Rename(at("f5"), at("h5")))
	must(t, os.Truncate(at("f6"), 4096))
	// The kernel would answer from its own entries, so that the mount is
	// not asked: drop them (root only), so every stat below reaches it.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Skipf("cannot drop the kernel's entries (needs root): %v", err)
	}
	remembered := stats.NamesRemembered.Load()
	sizeIs := func(want int64) func(os.FileInfo) error {
		return func(st os.FileInfo) error {
			if st.Size() != want {
				return fmt.Errorf("size %d, want %d", st.Size(), want)
			}
			return nil
		}
	}
	check := func(name string, want func(os.FileInfo) error) {
		t.Helper()
		st, err := os.Stat(at(name))
		if err == nil {
			err = want(st)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	check("f1", func(st os.FileInfo) error {
		if st.Mode().Perm() != 0o600 {
			return fmt.Errorf("mode %v, want 0600", st.Mode())
		}
		return nil
	})
	check("f2", sizeIs(1000))
	if _, err := os.Stat(at("f3")); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("f3 after unlink: %v", err)
	}
	for _, name := range []string{"f4", "g4"} {
		check(name, func(st os.FileInfo) error {
			if n := st.Sys().(*syscall.Stat_t).Nlink; n != 2 {
				return fmt.Errorf("%d links, want 2", n)
			}
			return nil
		})
	}
	if _, err := os.Stat(at("f5")); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("f5 after rename: %v", err)
	}
	check("h5", sizeIs(5))
	check("f6", sizeIs(4096))

	check("f9", sizeIs(9)) // unchanged: answered from memory
	if stats.NamesRemembered.Load() == remembered {
		t.Error("no stat after the local changes was answered from memory: the kernel still held its entries")
	}

	// A change by another client shows once the timeouts (1s) have
	// passed since the listing.
	for i := range files {
		os.Stat(at(fmt.Sprint("f", i))) // listed afresh
	}
	must(t, mt.cl.Truncate(ctx, "/d/f7", 777))
	must(t, mt.cl.Chmod(ctx, "/d/f8", 0o640))
	time.Sleep(1100 * time.Millisecond)
	check("f7", sizeIs(777))
	check("f8", func(st os.FileInfo) error {
		if st.Mode().Perm() != 0o640 {
			return fmt.Errorf("mode %v a timeout after another client's chmod, want 0640", st.Mode())
		}
		return nil
	})
	// A name another client made is found at once: absent names are
	// never answered from memory.
	f, err := mt.cl.Create(ctx, "/d/new")
	must(t, err)
	must(t, f.Close())
	if _, err := os.Stat(at("new")); err != nil {
		t.Errorf("a name made by another client: %v", err)
	}
}

// TestNegativeTimeout: with --negative-timeout the kernel keeps that a
// name is absent, so a name another client makes meanwhile shows only
// after it; without it (the default) at once; and a name made through
// the mount itself shows at once either way.
func TestNegativeTimeout(t *testing.T) {
	plain := mount(t, 64<<10)
	neg := mountOnWith(t, plain.c, Config{AllowOther: true, NegativeTimeout: 2 * time.Second})
	ctx := context.Background()
	late, mine := filepath.Join(neg.dir, "late"), filepath.Join(neg.dir, "mine")
	for _, p := range []string{late, mine, filepath.Join(plain.dir, "late")} {
		if _, err := os.Stat(p); !errors.Is(err, iofs.ErrNotExist) {
			t.Fatalf("%s before it is made: %v", p, err)
		}
	}
	t0 := time.Now()
	f, err := plain.cl.Create(ctx, "/late")
	must(t, err)
	must(t, f.Close())
	if _, err := os.Stat(filepath.Join(plain.dir, "late")); err != nil {
		t.Errorf("the default mount does not find a name made elsewhere at once: %v", err)
	}
	if _, err := os.Stat(late); !errors.Is(err, iofs.ErrNotExist) && time.Since(t0) < time.Second {
		t.Errorf("within the negative timeout the mount asked again: %v", err)
	}
	must(t, os.WriteFile(mine, []byte("x"), 0o644))
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a name made through the mount after a cached absence: %v", err)
	}
	time.Sleep(time.Until(t0.Add(2100 * time.Millisecond)))
	if _, err := os.Stat(late); err != nil {
		t.Errorf("past the negative timeout: %v", err)
	}
}

// TestReadDirTypes: a listing names each entry's type as stat does, the
// special files' too (ls --color and find -type read it from readdir).
func TestReadDirTypes(t *testing.T) {
	mt := mount(t, 64<<10)
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.WriteFile(at("file"), nil, 0o644))
	must(t, os.Mkdir(at("dir"), 0o755))
	must(t, os.Symlink("file", at("link")))
	must(t, syscall.Mkfifo(at("fifo"), 0o644))
	must(t, syscall.Mknod(at("sock"), syscall.S_IFSOCK|0o644, 0))
	want := map[string]iofs.FileMode{"file": 0, "dir": iofs.ModeDir, "link": iofs.ModeSymlink,
		"fifo": iofs.ModeNamedPipe, "sock": iofs.ModeSocket}
	ents, err := os.ReadDir(mt.dir)
	must(t, err)
	for _, e := range ents {
		if w, ok := want[e.Name()]; ok && e.Type() != w {
			t.Errorf("%s: readdir type %v, want %v", e.Name(), e.Type(), w)
		}
		delete(want, e.Name())
	}
	if len(want) != 0 {
		t.Errorf("not listed: %v", want)
	}
}

// TestDirAttrsAfterCreates: the GETATTR the kernel sends for a directory
// after each create in it is answered from memory, with the times the
// cluster gave the directory (its mtime and ctime are the new file's
// ctime, a new subdirectory adds a link); any other change to the
// directory through the mount, and another client's change once the
// attribute timeout has passed, show as they did.
func TestDirAttrsAfterCreates(t *testing.T) {
	mt := mount(t, 64<<10)
	ctx := context.Background()
	d := filepath.Join(mt.dir, "d")
	must(t, os.Mkdir(d, 0o755))
	stats := mt.m.FS.Stats()
	same := func(what string) {
		t.Helper()
		st, err := os.Stat(d)
		must(t, err)
		want, err := mt.cl.Stat(ctx, "/d")
		must(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		if !st.ModTime().Equal(want.ModTime()) || sys.Ctim != syscall.NsecToTimespec(want.ChangeTime().UnixNano()) ||
			uint32(sys.Nlink) != want.Nlink() || st.Mode() != want.Mode() {
			t.Fatalf("%s: the mount says mtime %v ctime %v nlink %d mode %v; the cluster %v %v %d %v", what,
				st.ModTime(), time.Unix(sys.Ctim.Unix()), sys.Nlink, st.Mode(), want.ModTime(), want.ChangeTime(), want.Nlink(), want.Mode())
		}
	}
	same("before")
	before := stats.AttrsRemembered.Load()
	for i := range 20 {
		f, err := os.OpenFile(filepath.Join(d, fmt.Sprint("f", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		must(t, err)
		must(t, f.Close())
		same(fmt.Sprint("after create ", i))
	}
	if n := stats.AttrsRemembered.Load() - before; n < 15 {
		t.Fatalf("%d of the directory's 20 GETATTRs after creates answered from memory, want most", n)
	}
	must(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
	same("after mkdir")
	must(t, os.Remove(filepath.Join(d, "f0")))
	same("after unlink")
	must(t, os.Chmod(d, 0o700))
	same("after chmod")
	must(t, os.Rename(filepath.Join(d, "f1"), filepath.Join(d, "g1")))
	same("after rename")
	must(t, os.Link(filepath.Join(d, "f2"), filepath.Join(d, "h2")))
	same("after link")
	must(t, os.Symlink("f3", filepath.Join(d, "s3")))
	same("after symlink")
	// Another client's change: shown once the timeout (1 s) has passed.
	must(t, mt.cl.Chmod(ctx, "/d", 0o750))
	time.Sleep(1100 * time.Millisecond)
	same("a timeout after another client's chmod")
}
