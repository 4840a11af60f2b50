package sdk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
	"time"
)

// TestErrno: the one errno table, as the FUSE mount and the agent answer.
func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("stat /x: %w", ErrNotExist), syscall.ENOENT},
		{fs.ErrNotExist, syscall.ENOENT},
		{ErrStale, syscall.ENOENT},
		{fmt.Errorf("mkdir /d: %w", ErrExist), syscall.EEXIST},
		{ErrNotDir, syscall.ENOTDIR},
		{ErrIsDir, syscall.EISDIR},
		{fmt.Errorf("x: %w", ErrNotEmpty), syscall.ENOTEMPTY},
		{fmt.Errorf("x: %w (%w)", fs.ErrInvalid, ErrNameTooLong), syscall.ENAMETOOLONG}, // as the cluster's refusal wraps it
		{ErrLoop, syscall.EINVAL},
		{ErrInvalid, syscall.EINVAL},
		{fmt.Errorf("mkdir %q: empty name: %w", "//", fs.ErrInvalid), syscall.EINVAL},
		{fs.ErrPermission, syscall.EACCES},
		{fmt.Errorf("write: chunk 1:0: %w", ErrNoSpace), syscall.ENOSPC},
		{fmt.Errorf("read: chain 2: %w", ErrUnavailable), syscall.EIO},
		{ErrNotWritable, syscall.EBADF},
		{ErrOutOfRange, syscall.EINVAL},
		{ErrTooLarge, syscall.EFBIG},
		{fmt.Errorf("x: %w", context.Canceled), syscall.EINTR},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), syscall.ETIMEDOUT},
		{errors.New("something else"), syscall.EIO},
	} {
		if got := Errno(tc.err); got != tc.want {
			t.Errorf("Errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestStandardErrors: errors from a real cluster match io/fs's conditions
// as well as the SDK's own, whichever call returns them.
func TestStandardErrors(t *testing.T) {
	if !errors.Is(ErrNotExist, fs.ErrNotExist) || !errors.Is(ErrExist, fs.ErrExist) {
		t.Fatal("the SDK's sentinels do not match io/fs's")
	}
	c := startCluster(t, t.TempDir())
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cl.WriteFile(ctx, "/d/f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	errOf := func(_ any, err error) error { return err }
	for _, tc := range []struct {
		name       string
		err        error
		std, own   error
		alsoNotStd error // a condition it must not match
	}{
		{"stat missing", errOf(cl.Stat(ctx, "/nope")), fs.ErrNotExist, ErrNotExist, fs.ErrExist},
		{"stat under a missing dir", errOf(cl.Stat(ctx, "/nope/f")), fs.ErrNotExist, ErrNotExist, nil},
		{"open missing", errOf(cl.Open(ctx, "/d/nope")), fs.ErrNotExist, ErrNotExist, nil},
		{"readdir missing", errOf(cl.ReadDir(ctx, "/nope")), fs.ErrNotExist, ErrNotExist, nil},
		{"remove missing", cl.Remove(ctx, "/d/nope"), fs.ErrNotExist, ErrNotExist, nil},
		{"rename missing", cl.Rename(ctx, "/d/nope", "/d/g"), fs.ErrNotExist, ErrNotExist, nil},
		{"readlink missing", errOf(cl.Readlink(ctx, "/nope")), fs.ErrNotExist, ErrNotExist, nil},
		{"mkdir existing", cl.Mkdir(ctx, "/d", 0o755), fs.ErrExist, ErrExist, fs.ErrNotExist},
		{"create existing", errOf(cl.Create(ctx, "/d/f")), fs.ErrExist, ErrExist, nil},
		{"symlink over a file", cl.Symlink(ctx, "/x", "/d/f"), fs.ErrExist, ErrExist, nil},
		{"bad path", errOf(cl.Stat(ctx, "d/f")), fs.ErrInvalid, ErrInvalid, fs.ErrNotExist},
		{"dot-dot", cl.Mkdir(ctx, "/d/../e", 0o755), fs.ErrInvalid, ErrInvalid, nil},
		{"remove a full dir", cl.Remove(ctx, "/d"), nil, ErrNotEmpty, fs.ErrNotExist},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if tc.std != nil && !errors.Is(tc.err, tc.std) {
			t.Errorf("%s: %v does not match %v", tc.name, tc.err, tc.std)
		}
		if !errors.Is(tc.err, tc.own) {
			t.Errorf("%s: %v does not match %v", tc.name, tc.err, tc.own)
		}
		if tc.alsoNotStd != nil && errors.Is(tc.err, tc.alsoNotStd) {
			t.Errorf("%s: %v matches %v too", tc.name, tc.err, tc.alsoNotStd)
		}
	}
	// A refused token is a permission error.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if bad, err := Connect(cctx, Config{Cluster: c.Addr, Token: "not-the-token"}); !errors.Is(err, fs.ErrPermission) {
		if bad != nil {
			bad.Close()
		}
		t.Errorf("connecting with a wrong token: %v, want fs.ErrPermission", err)
	}
}

// TestClosedClient: calls after Close fail at once, and a call in flight
// is cut short with ErrClosed as its context's cause.
func TestClosedClient(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	cctx, done := cl.call(ctx)
	defer done()
	cl.Close()
	select {
	case <-cctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a call in flight outlived Close")
	}
	if cause := context.Cause(cctx); !errors.Is(cause, ErrClosed) {
		t.Fatalf("cause %v, want ErrClosed", cause)
	}
	start := time.Now()
	if _, err := cl.Stat(ctx, "/"); err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("stat after Close: %v after %v", err, time.Since(start))
	}
}
