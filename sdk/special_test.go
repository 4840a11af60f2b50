package sdk

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"syscall"
	"testing"
)

// TestSpecialFilesAndXattrs: through the SDK, special files keep their
// type and rdev, extended attributes round-trip, each failure is the
// error (and errno) POSIX gives, and Allocate extends or keeps the length.
func TestSpecialFilesAndXattrs(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	ctx := context.Background()
	kinds := []struct {
		name string
		mode uint32
		rdev uint32
		want fs.FileMode
	}{
		{"fifo", syscall.S_IFIFO | 0o644, 0, fs.ModeNamedPipe},
		{"chr", syscall.S_IFCHR | 0o600, 0x103, fs.ModeDevice | fs.ModeCharDevice},
		{"blk", syscall.S_IFBLK | 0o600, 0x801, fs.ModeDevice},
		{"sock", syscall.S_IFSOCK | 0o600, 0, fs.ModeSocket},
		{"reg", 0o600, 0, 0},
	}
	for _, k := range kinds {
		wantMode := k.mode
		if wantMode&syscall.S_IFMT == 0 {
			wantMode |= syscall.S_IFREG
		}
		fi, err := cl.MknodAt(ctx, 0, "/"+k.name, k.mode, k.rdev, Owner{Mode: k.mode & 0o7777})
		if err != nil || fi.Mode().Type() != k.want || fi.Rdev() != k.rdev || fi.UnixMode() != wantMode {
			t.Fatalf("mknod %s: %v (mode %#o, rdev %#x), %v", k.name, fi, fi.UnixMode(), fi.Rdev(), err)
		}
	}
	if _, err := cl.MknodAt(ctx, 0, "/dir", syscall.S_IFDIR|0o755, 0, Owner{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("mknod of a directory: %v", err)
	}
	if _, err := cl.Open(ctx, "/fifo"); Errno(err) != syscall.EOPNOTSUPP {
		t.Fatalf("the SDK opening a fifo: %v", err)
	}

	if err := cl.SetXattrAt(ctx, 0, "/reg", "user.k", []byte("v"), XattrCreate); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.GetXattrAt(ctx, 0, "/reg", "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("getxattr: %q, %v", v, err)
	}
	if names, err := cl.ListXattrAt(ctx, 0, "/reg"); err != nil || !slices.Equal(names, []string{"user.k"}) {
		t.Fatalf("listxattr: %v, %v", names, err)
	}
	errs := []struct {
		name  string
		err   error
		is    error
		errno syscall.Errno
	}{
		{"create over one", cl.SetXattrAt(ctx, 0, "/reg", "user.k", nil, XattrCreate), ErrExist, syscall.EEXIST},
		{"replace a missing one", cl.SetXattrAt(ctx, 0, "/reg", "user.no", nil, XattrReplace), ErrNoXattr, syscall.ENODATA},
		{"get a missing one", func() error { _, err := cl.GetXattrAt(ctx, 0, "/reg", "user.no"); return err }(), ErrNoXattr, syscall.ENODATA},
		{"remove a missing one", cl.RemoveXattrAt(ctx, 0, "/reg", "user.no"), ErrNoXattr, syscall.ENODATA},
		{"an unknown namespace", cl.SetXattrAt(ctx, 0, "/reg", "x.y", nil, 0), ErrNotSupported, syscall.EOPNOTSUPP},
		{"a value too big", cl.SetXattrAt(ctx, 0, "/reg", "user.big", make([]byte, 64<<10+1), 0), ErrXattrTooBig, syscall.E2BIG},
		{"an empty name", cl.SetXattrAt(ctx, 0, "/reg", "", nil, 0), ErrXattrRange, syscall.ERANGE},
		{"a missing file", cl.SetXattrAt(ctx, 0, "/nope", "user.k", nil, 0), ErrNotExist, syscall.ENOENT},
	}
	for _, e := range errs {
		if !errors.Is(e.err, e.is) || Errno(e.err) != e.errno {
			t.Errorf("%s: %v (errno %v), want %v", e.name, e.err, Errno(e.err), e.errno)
		}
	}
	if err := cl.RemoveXattrAt(ctx, 0, "/reg", "user.k"); err != nil {
		t.Fatal(err)
	}

	f, err := cl.OpenFile(ctx, "/reg", true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, a := range []struct {
		off, n int64
		keep   bool
		size   int64
	}{{0, 100, false, 100}, {50, 10, false, 100}, {0, 1 << 20, true, 100}, {100, 28, false, 128}} {
		if err := f.Allocate(ctx, a.off, a.n, a.keep); err != nil {
			t.Fatal(err)
		}
		if fi, err := cl.Stat(ctx, "/reg"); err != nil || fi.Size() != a.size {
			t.Fatalf("after allocate(%d, %d, keep %v): %v, %v; want size %d", a.off, a.n, a.keep, fi, err, a.size)
		}
	}
	if err := f.Allocate(ctx, 0, 0, false); Errno(err) != syscall.EINVAL {
		t.Fatalf("allocate of nothing: %v", err)
	}
}
