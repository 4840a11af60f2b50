package fuse

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/fsmeta"
)

// errnoOf is the errno inside err, 0 for none.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestErrnos: each failure a POSIX tool can meet gives the errno a local
// file system gives.
func TestErrnos(t *testing.T) {
	mt := mount(t, 64<<10)
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.Mkdir(at("d"), 0o755))
	must(t, os.Mkdir(at("full"), 0o755))
	must(t, os.WriteFile(at("full/x"), []byte("x"), 0o644))
	must(t, os.WriteFile(at("f"), []byte("file"), 0o644))
	long := strings.Repeat("n", 256)
	outside := t.TempDir()
	cases := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"mkdir over a directory", os.Mkdir(at("d"), 0o755), syscall.EEXIST},
		{"mkdir in a missing directory", os.Mkdir(at("nope/d"), 0o755), syscall.ENOENT},
		{"create exclusive over a file", func() error {
			_, err := os.OpenFile(at("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			return err
		}(), syscall.EEXIST},
		{"stat of a missing name", func() error { _, err := os.Stat(at("missing")); return err }(), syscall.ENOENT},
		{"create with a 256-byte name", os.WriteFile(at(long), nil, 0o644), syscall.ENAMETOOLONG},
		{"stat of a 256-byte name", func() error { _, err := os.Stat(at(long)); return err }(), syscall.ENAMETOOLONG},
		{"mkdir with a 256-byte name", os.Mkdir(at(long), 0o755), syscall.ENAMETOOLONG},
		{"rmdir of a non-empty directory", syscall.Rmdir(at("full")), syscall.ENOTEMPTY},
		{"rmdir of a file", syscall.Rmdir(at("f")), syscall.ENOTDIR},
		{"unlink of a directory", syscall.Unlink(at("d")), syscall.EISDIR},
		{"a file as a directory", os.WriteFile(at("f/x"), nil, 0o644), syscall.ENOTDIR},
		{"rename a directory over a non-empty one", syscall.Rename(at("d"), at("full")), syscall.ENOTEMPTY},
		{"rename a directory over a file", syscall.Rename(at("d"), at("f")), syscall.ENOTDIR},
		{"rename a file over a directory", syscall.Rename(at("f"), at("d")), syscall.EISDIR},
		{"rename a directory into itself", os.Rename(at("d"), at("d/sub")), syscall.EINVAL},
		{"rename out of the mount", os.Rename(at("f"), filepath.Join(outside, "f")), syscall.EXDEV},
		{"hard link out of the mount", os.Link(at("f"), filepath.Join(outside, "f")), syscall.EXDEV},
		{"hard link to a directory", os.Link(at("d"), at("d2")), syscall.EPERM},
		{"readlink of a file", func() error { _, err := os.Readlink(at("f")); return err }(), syscall.EINVAL},
		{"open a directory for writing", func() error { _, err := os.OpenFile(at("d"), os.O_WRONLY, 0); return err }(), syscall.EISDIR},
		{"truncate a directory", os.Truncate(at("d"), 0), syscall.EISDIR},
		{"rename with RENAME_NOREPLACE over a file", unix.Renameat2(unix.AT_FDCWD, at("d"), unix.AT_FDCWD, at("f"), unix.RENAME_NOREPLACE), syscall.EEXIST},
	}
	for _, tc := range cases {
		if got := errnoOf(tc.err); got != tc.want {
			t.Errorf("%s: %v (errno %d), want %v", tc.name, tc.err, got, tc.want)
		}
	}
	// Writing to a read-only descriptor and reading a write-only one.
	r, err := os.Open(at("f"))
	must(t, err)
	defer r.Close()
	if _, err := r.Write([]byte("x")); errnoOf(err) != syscall.EBADF {
		t.Errorf("write to a read-only descriptor: %v", err)
	}
}

// TestOperations: every operation works as on a local file system, checked
// through the os package, and what it did is what the SDK sees.
func TestOperations(t *testing.T) {
	mt := mount(t, 64<<10)
	ctx := context.Background()
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes: five chunks

	t.Run("create write read", func(t *testing.T) {
		must(t, os.WriteFile(at("a"), data, 0o640))
		got, err := os.ReadFile(at("a"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes: %v", len(got), err)
		}
		fi, err := os.Stat(at("a"))
		if err != nil || fi.Size() != int64(len(data)) || fi.Mode().Perm() != 0o640 || !fi.Mode().IsRegular() {
			t.Fatalf("stat: %v %v", fi, err)
		}
		in, err := mt.cl.Stat(ctx, "/a")
		if err != nil || in.Size() != int64(len(data)) || in.Mode() != 0o640 {
			t.Fatalf("the SDK's view: %v %v", in, err)
		}
	})
	t.Run("overwrite in place and append", func(t *testing.T) {
		f, err := os.OpenFile(at("a"), os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("PATCH"), 65534) // across a chunk boundary
		must(t, err)
		must(t, f.Close())
		f, err = os.OpenFile(at("a"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.Write([]byte("TAIL"))
		must(t, err)
		must(t, f.Close())
		want := append(bytes.Clone(data), "TAIL"...)
		copy(want[65534:], "PATCH")
		if got, err := os.ReadFile(at("a")); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after patch and append: %d bytes, %v", len(got), err)
		}
	})
	t.Run("O_TRUNC", func(t *testing.T) {
		must(t, os.WriteFile(at("t"), data, 0o644))
		must(t, os.WriteFile(at("t"), []byte("short"), 0o644))
		if got, err := os.ReadFile(at("t")); err != nil || string(got) != "short" {
			t.Fatalf("after rewrite with O_TRUNC: %q %v", got, err)
		}
	})
	t.Run("truncate", func(t *testing.T) {
		must(t, os.WriteFile(at("tr"), data, 0o644))
		must(t, os.Truncate(at("tr"), 1000))
		must(t, os.Truncate(at("tr"), 100000)) // extends with zeros, not the old bytes
		got, err := os.ReadFile(at("tr"))
		if err != nil || len(got) != 100000 || !bytes.Equal(got[:1000], data[:1000]) || !bytes.Equal(got[1000:], make([]byte, 99000)) {
			t.Fatalf("after truncate down and up: %d bytes, %v", len(got), err)
		}
		f, err := os.OpenFile(at("tr"), os.O_RDWR, 0)
		must(t, err)
		must(t, f.Truncate(10))
		if fi, _ := f.Stat(); fi.Size() != 10 {
			t.Fatalf("fstat after ftruncate: %d", fi.Size())
		}
		must(t, f.Close())
		if in, _ := mt.cl.Stat(ctx, "/tr"); in.Size() != 10 {
			t.Fatalf("the SDK's length after ftruncate and close: %d", in.Size())
		}
	})
	t.Run("chmod chown utimens", func(t *testing.T) {
		must(t, os.Chown(at("a"), 1234, 5678))
		must(t, syscall.Chmod(at("a"), 0o4755)) // after chown, which clears setuid as on any file system
		mtime := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
		must(t, os.Chtimes(at("a"), mtime.Add(time.Hour), mtime))
		fi, err := os.Stat(at("a"))
		must(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o755 || fi.Mode()&os.ModeSetuid == 0 || st.Uid != 1234 || st.Gid != 5678 || !fi.ModTime().Equal(mtime) {
			t.Fatalf("attributes: mode %v uid %d gid %d mtime %v", fi.Mode(), st.Uid, st.Gid, fi.ModTime())
		}
		in, _ := mt.cl.Stat(ctx, "/a")
		if in.UnixMode()&0o7777 != 0o4755 || in.Mode() != iofs.ModeSetuid|0o755 || in.UID() != 1234 || !in.ModTime().Equal(mtime) || !in.AccessTime().Equal(mtime.Add(time.Hour)) {
			t.Fatalf("the SDK's view: %v", in)
		}
	})
	t.Run("mkdir readdir rmdir", func(t *testing.T) {
		must(t, os.MkdirAll(at("dir/sub"), 0o750))
		for i := 0; i < 30; i++ {
			must(t, os.WriteFile(at("dir/f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), []byte{byte(i)}, 0o644))
		}
		ents, err := os.ReadDir(at("dir"))
		if err != nil || len(ents) != 31 {
			t.Fatalf("readdir: %d entries, %v", len(ents), err)
		}
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
			info, err := e.Info()
			if err != nil || (e.Name() == "sub") != info.IsDir() {
				t.Fatalf("entry %s: %v %v", e.Name(), info, err)
			}
		}
		if !slices.Contains(names, "sub") || !slices.Contains(names, "fa") || !slices.Contains(names, "fdx") {
			t.Fatalf("names: %v", names)
		}
		fi, _ := os.Stat(at("dir/sub"))
		if !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Fatalf("subdirectory: %v", fi.Mode())
		}
		must(t, os.Remove(at("dir/sub")))
		must(t, os.RemoveAll(at("dir")))
		if _, err := os.Stat(at("dir")); !os.IsNotExist(err) {
			t.Fatalf("after RemoveAll: %v", err)
		}
	})
	t.Run("rename and replace", func(t *testing.T) {
		must(t, os.WriteFile(at("r1"), []byte("one"), 0o644))
		must(t, os.WriteFile(at("r2"), []byte("two"), 0o644))
		must(t, os.Rename(at("r1"), at("r2")))
		if got, _ := os.ReadFile(at("r2")); string(got) != "one" {
			t.Fatalf("replaced file reads %q", got)
		}
		if _, err := os.Stat(at("r1")); !os.IsNotExist(err) {
			t.Fatalf("old name after rename: %v", err)
		}
		must(t, os.MkdirAll(at("m/inner"), 0o755))
		must(t, os.Mkdir(at("empty"), 0o755))
		must(t, syscall.Rename(at("m"), at("empty"))) // a directory over an empty one (os.Rename refuses)
		if _, err := os.Stat(at("empty/inner")); err != nil {
			t.Fatal(err)
		}
		if _, err := mt.cl.Stat(ctx, "/empty/inner"); err != nil {
			t.Fatalf("the SDK's view: %v", err)
		}
	})
	t.Run("symlink readlink", func(t *testing.T) {
		must(t, os.Symlink("r2", at("ln")))
		if target, err := os.Readlink(at("ln")); err != nil || target != "r2" {
			t.Fatalf("readlink: %q %v", target, err)
		}
		fi, err := os.Lstat(at("ln"))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("lstat: %v %v", fi, err)
		}
		if got, err := os.ReadFile(at("ln")); err != nil || string(got) != "one" {
			t.Fatalf("through the link: %q %v", got, err)
		}
	})
	t.Run("hard link", func(t *testing.T) {
		must(t, os.Link(at("r2"), at("hl")))
		fi, _ := os.Stat(at("r2"))
		if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 2 {
			t.Fatalf("nlink %d", n)
		}
		must(t, os.Remove(at("r2")))
		if got, err := os.ReadFile(at("hl")); err != nil || string(got) != "one" {
			t.Fatalf("the other name after unlink: %q %v", got, err)
		}
	})
	t.Run("unlinked while open", func(t *testing.T) {
		f, err := os.OpenFile(at("tmp"), os.O_CREATE|os.O_RDWR, 0o600)
		must(t, err)
		defer f.Close()
		_, err = f.Write([]byte("scratch"))
		must(t, err)
		must(t, os.Remove(at("tmp")))
		b := make([]byte, 7)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != "scratch" {
			t.Fatalf("read after unlink: %q %v", b, err)
		}
		if fi, err := f.Stat(); err != nil || fi.Size() != 7 {
			t.Fatalf("fstat after unlink: %v %v", fi, err)
		}
	})
	t.Run("fsync publishes the length", func(t *testing.T) {
		f, err := os.Create(at("sync"))
		must(t, err)
		defer f.Close()
		_, err = f.Write(data[:5000])
		must(t, err)
		must(t, f.Sync())
		if in, err := mt.cl.Stat(ctx, "/sync"); err != nil || in.Size() != 5000 {
			t.Fatalf("length seen by the SDK after fsync: %v %v", in, err)
		}
	})
	t.Run("statfs access", func(t *testing.T) {
		var st syscall.Statfs_t
		must(t, syscall.Statfs(mt.dir, &st))
		if st.Namelen != 255 || st.Blocks == 0 || st.Bfree > st.Blocks || st.Files < 5 || st.Bsize != 4096 {
			t.Fatalf("statfs: %+v", st)
		}
		// The mount's size is its storage's: three targets on the test's
		// disk in chains of three hold what that disk holds.
		// (Their first heartbeats may still be on the way.)
		var disk syscall.Statfs_t
		must(t, syscall.Statfs(os.TempDir(), &disk))
		want := disk.Blocks * uint64(disk.Bsize)
		for deadline := time.Now().Add(5 * time.Second); st.Blocks*uint64(st.Bsize) < want/2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			must(t, syscall.Statfs(mt.dir, &st))
		}
		if got := st.Blocks * uint64(st.Bsize); got > want || got < want-want/50 {
			t.Fatalf("statfs: %d bytes in all, the disk under the targets has %d", got, want)
		}
		must(t, syscall.Access(at("a"), 6)) // read and write, as root
		if err := syscall.Access(at("missing"), 4); errnoOf(err) != syscall.ENOENT {
			t.Fatalf("access of a missing file: %v", err)
		}
	})
}

// TestLargestFile: a file may be truncated to fsmeta.MaxFileSize; past it
// truncate(2), truncate(1) and a write fail with EFBIG ("File too large").
func TestLargestFile(t *testing.T) {
	mt := mount(t, 64<<10)
	p := filepath.Join(mt.dir, "huge")
	must(t, os.WriteFile(p, nil, 0o644))
	must(t, os.Truncate(p, fsmeta.MaxFileSize))
	if fi, err := os.Stat(p); err != nil || fi.Size() != fsmeta.MaxFileSize {
		t.Fatalf("after truncating to the largest length: %v, %v", fi, err)
	}
	if err := os.Truncate(p, fsmeta.MaxFileSize+1); errnoOf(err) != syscall.EFBIG {
		t.Fatalf("truncate(2) past the largest length: %v", err)
	}
	out, err := exec.Command("truncate", "-s", strconv.FormatInt(fsmeta.MaxFileSize+1, 10), p).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "File too large") {
		t.Fatalf("truncate -s past the largest length: %v, %q", err, out)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), fsmeta.MaxFileSize); errnoOf(err) != syscall.EFBIG {
		t.Fatalf("a write past the largest length: %v", err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != fsmeta.MaxFileSize {
		t.Fatalf("after the refusals: %v, %v", fi, err)
	}
	must(t, os.Remove(p))
}
