package sdk

import (
	"context"
	"io/fs"
	"syscall"
	"testing"
	"time"
)

// TestFileInfo: Stat, ReadDir, the *At calls and File.Inode return
// fs.FileInfo and fs.DirEntry values with io/fs's type bits, and the
// inode's own attributes beside them.
func TestFileInfo(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	if err := cl.Mkdir(ctx, "/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := cl.WriteFile(ctx, "/d/f", make([]byte, 1234)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Symlink(ctx, "/d/f", "/d/l"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Chmod(ctx, "/d/f", 0o4640|syscall.S_ISVTX); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1_700_000_000, 42)
	if err := cl.Utimes(ctx, "/d/f", mtime.Add(time.Minute), mtime); err != nil {
		t.Fatal(err)
	}

	var _ fs.FileInfo = (*FileInfo)(nil)
	root, err := cl.Stat(ctx, "/")
	if err != nil || root.Name() != "/" || !root.IsDir() || root.Mode().Type() != fs.ModeDir {
		t.Fatalf("stat /: %v %v", root, err)
	}
	d, err := cl.Stat(ctx, "/d")
	if err != nil || d.Name() != "d" || !d.IsDir() || d.Mode() != fs.ModeDir|0o750 || d.UnixMode() != syscall.S_IFDIR|0o750 {
		t.Fatalf("stat /d: %v %v", d, err)
	}
	f, err := cl.Stat(ctx, "/d/f")
	switch {
	case err != nil:
		t.Fatal(err)
	case f.Name() != "f" || f.Size() != 1234 || f.IsDir() || !f.Mode().IsRegular():
		t.Fatalf("stat /d/f: name %q size %d mode %v", f.Name(), f.Size(), f.Mode())
	case f.Mode() != fs.ModeSetuid|fs.ModeSticky|0o640 || f.UnixMode() != syscall.S_IFREG|syscall.S_ISUID|syscall.S_ISVTX|0o640:
		t.Fatalf("stat /d/f: mode %v, st_mode %o", f.Mode(), f.UnixMode())
	case !f.ModTime().Equal(mtime) || !f.AccessTime().Equal(mtime.Add(time.Minute)) || f.ChangeTime().IsZero():
		t.Fatalf("stat /d/f: times %v %v %v", f.ModTime(), f.AccessTime(), f.ChangeTime())
	case f.Nlink() != 1 || f.Ino() == 0 || f.Ino() == d.Ino() || f.ChunkSize() != 64<<10 || f.Sys() != nil:
		t.Fatalf("stat /d/f: nlink %d ino %d chunk %d", f.Nlink(), f.Ino(), f.ChunkSize())
	}
	l, err := cl.Stat(ctx, "/d/l")
	if err != nil || l.Mode().Type() != fs.ModeSymlink || l.Target() != "/d/f" || l.UnixMode()&syscall.S_IFMT != syscall.S_IFLNK {
		t.Fatalf("stat /d/l: %v %v", l, err)
	}
	if at, err := cl.StatAt(ctx, d.Ino(), "f"); err != nil || at.Ino() != f.Ino() || at.Name() != "f" {
		t.Fatalf("statat: %v %v", at, err)
	}
	if self, err := cl.StatAt(ctx, d.Ino(), ""); err != nil || self.Ino() != d.Ino() || self.Name() != "" {
		t.Fatalf("statat of the inode itself: %v %v", self, err)
	}

	ents, err := cl.ReadDir(ctx, "/d")
	if err != nil || len(ents) != 2 {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	want := []struct {
		name string
		typ  fs.FileMode
		ino  uint64
	}{{"f", 0, f.Ino()}, {"l", fs.ModeSymlink, l.Ino()}}
	for i, e := range ents {
		var _ fs.DirEntry = e
		info, err := e.Info()
		if e.Name() != want[i].name || e.Type() != want[i].typ || e.IsDir() || e.Ino() != want[i].ino || err != nil ||
			info.Name() != e.Name() || info.Mode().Type() != e.Type() {
			t.Fatalf("entry %d: %q %v %d, info %v %v", i, e.Name(), e.Type(), e.Ino(), info, err)
		}
	}

	// A handle's inode carries the length it knows.
	w, err := cl.Create(ctx, "/d/w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(make([]byte, 777), 0); err != nil {
		t.Fatal(err)
	}
	if in := w.Inode(); in.Size() != 777 || in.Name() != "w" || !in.Mode().IsRegular() {
		t.Fatalf("open handle's inode: %d bytes, name %q, mode %v", in.Size(), in.Name(), in.Mode())
	}
	w.Close()
}
