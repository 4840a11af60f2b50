package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

func readAll(t *testing.T, cl *Client, p string) []byte {
	t.Helper()
	f, err := cl.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("read %s: %d bytes, %v", p, n, err)
	}
	return b
}

// TestTruncate: shrinking drops what lies past the new end on storage (an
// extension afterwards reads zeros, not the old bytes), across chunk
// boundaries and inside a chunk.
func TestTruncate(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	ctx := context.Background()
	data := fabrictest.RandBytes(3, 300<<10) // 64 KiB chunks: five of them
	f, err := cl.Create(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := bytes.Clone(data)
	for _, size := range []int64{200 << 10, 100000, 64 << 10, 10, 0} {
		if err := cl.Truncate(ctx, "/t", size); err != nil {
			t.Fatal(err)
		}
		want = want[:size]
		if got := readAll(t, cl, "/t"); !bytes.Equal(got, want) {
			t.Fatalf("after truncate to %d: %d bytes, equal=%v", size, len(got), bytes.Equal(got, want))
		}
		// Extending again reads zeros past the old end.
		if err := cl.Truncate(ctx, "/t", size+70000); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, cl, "/t")
		if !bytes.Equal(got[:size], want) || !bytes.Equal(got[size:], make([]byte, 70000)) {
			t.Fatalf("extension after truncate to %d does not read zeros", size)
		}
		if err := cl.Truncate(ctx, "/t", size); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Truncate(ctx, "/", 0); !errors.Is(err, ErrIsDir) {
		t.Fatalf("truncate of a directory: %v", err)
	}
	if err := cl.Truncate(ctx, "/t", -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative length: %v", err)
	}
	// A handle that truncates knows its new length: Close does not extend
	// the file back.
	w, err := cl.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(data[:5000], 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(ctx, 100); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if in, err := cl.Stat(ctx, "/t"); err != nil || in.Size() != 100 {
		t.Fatalf("length after a handle truncated and closed: %v %v", in, err)
	}
}

// TestAttributes: chmod, chown, utimes, link, readlink, statfs, fsync and
// the errors callers branch on.
func TestAttributes(t *testing.T) {
	dir := t.TempDir()
	c := startCluster(t, dir)
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	other := connect(t, c)
	defer other.Close()
	ctx := context.Background()
	if err := cl.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := cl.Create(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if in, _ := other.Stat(ctx, "/d/f"); in.Size() != 0 {
		t.Fatalf("length visible before fsync: %d", in.Size())
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if in, _ := other.Stat(ctx, "/d/f"); in.Size() != 5 {
		t.Fatalf("length after fsync, seen by another client: %d", in.Size())
	}
	if _, err := f.WriteAt([]byte(" world"), 5); err != nil {
		t.Fatal("the handle is unusable after fsync:", err)
	}
	f.Close()
	if err := cl.Chmod(ctx, "/d/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cl.Chown(ctx, "/d/f", 1000, 100); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1_600_000_000, 5)
	if err := cl.Utimes(ctx, "/d/f", mt.Add(time.Hour), mt); err != nil {
		t.Fatal(err)
	}
	in, err := other.Stat(ctx, "/d/f")
	if err != nil || in.Mode() != 0o600 || in.UID() != 1000 || in.GID() != 100 || !in.ModTime().Equal(mt) || !in.AccessTime().Equal(mt.Add(time.Hour)) || in.Size() != 11 {
		t.Fatalf("attributes: %v %v", in, err)
	}
	if err := cl.Link(ctx, "/d/f", "/g"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, other, "/g"); string(got) != "hello world" {
		t.Fatalf("through the hard link: %q", got)
	}
	if err := cl.Symlink(ctx, "d/f", "/s"); err != nil {
		t.Fatal(err)
	}
	if target, err := cl.Readlink(ctx, "/s"); err != nil || target != "d/f" {
		t.Fatalf("readlink: %q %v", target, err)
	}
	if _, err := cl.Readlink(ctx, "/g"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("readlink of a file: %v", err)
	}
	u, err := cl.Statfs(ctx)
	if err != nil || u.Inodes != 4 || u.Files != 1 || u.Bytes != 11 {
		t.Fatalf("statfs: %+v %v", u, err)
	}
	// Three targets on one disk, chains of three: the capacity is the
	// disk's, as the targets report it with their heartbeats.
	for deadline := time.Now().Add(5 * time.Second); u.Targets < 3 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if u, err = cl.Statfs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	disk, avail := st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	if u.Targets != 3 || u.Capacity != disk || u.Free > u.Capacity || u.Free+disk/20 < avail || u.Free > avail+disk/20 {
		t.Fatalf("statfs space: %d targets, %d capacity, %d free; the disk has %d, %d available", u.Targets, u.Capacity, u.Free, disk, avail)
	}
	// The *At calls, relative to a directory inode.
	d, err := cl.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cl.MkdirAt(ctx, d.Ino(), "sub", Owner{Mode: 0o700, UID: 5, GID: 6})
	if err != nil || sub.UID() != 5 || sub.Mode() != fs.ModeDir|0o700 || sub.Name() != "sub" {
		t.Fatalf("mkdirat: %v %v", sub, err)
	}
	ents, more, err := cl.ListAt(ctx, d.Ino(), "", "", 10)
	if err != nil || more || len(ents) != 2 || !ents[0].Type().IsRegular() || ents[1].FileInfo() == nil || ents[1].FileInfo().Ino() != sub.Ino() {
		t.Fatalf("listat: %v %v %v", ents, more, err)
	}
	if err := cl.RenameAt(ctx, d.Ino(), "f", sub.Ino(), "f2"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"rmdir non-empty", cl.RmdirAt(ctx, d.Ino(), "sub"), ErrNotEmpty},
		{"unlink a directory", cl.UnlinkAt(ctx, d.Ino(), "sub"), ErrIsDir},
		{"rmdir a file", cl.RmdirAt(ctx, sub.Ino(), "f2"), ErrNotDir},
		{"long name", func() error { _, err := cl.CreateAt(ctx, d.Ino(), strings.Repeat("x", 256), Owner{}); return err }(), ErrNameTooLong},
		{"into itself", cl.RenameAt(ctx, 0, "/d", sub.Ino(), "d"), ErrLoop},
		{"exists", func() error { _, err := cl.MkdirAt(ctx, 0, "/d", Owner{}); return err }(), ErrExist},
		{"missing", func() error { _, err := cl.StatAt(ctx, d.Ino(), "nope"); return err }(), ErrNotExist},
		{"open a directory", func() error { _, err := cl.OpenAt(ctx, d.Ino(), "", false); return err }(), ErrIsDir},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// TestRenameNoReplaceRace: of many clients renaming their own file to one
// name without replacing, exactly one succeeds and the rest get ErrExist.
func TestRenameNoReplaceRace(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	var clients []*Client
	for i := 0; i < n; i++ {
		cl := connect(t, c)
		defer cl.Close()
		if err := cl.WriteFile(ctx, fmt.Sprintf("/src-%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cl)
	}
	errs := make(chan error, n)
	for i, cl := range clients {
		go func() { errs <- cl.RenameNoReplaceAt(ctx, 0, fmt.Sprintf("/src-%d", i), 0, "/dst") }()
	}
	won := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, ErrExist):
			t.Fatalf("a losing rename: %v", err)
		}
	}
	ents, err := clients[0].ReadDir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if won != 1 || len(ents) != n {
		t.Fatalf("%d renames won, %d names left (want 1 and %d)", won, len(ents), n)
	}
}
