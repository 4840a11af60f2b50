package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// asNobody runs a shell command as uid/gid 65534 and returns its output.
func asNobody(dir, script string) (string, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPermissions: another user meets the permission checks a local file
// system makes, from the modes and owners the cluster keeps.
func TestPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	mt := mount(t, 64<<10)
	must(t, os.Chmod(filepath.Dir(mt.dir), 0o755)) // the temporary directory above the mount
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.WriteFile(at("secret"), []byte("s"), 0o600))
	must(t, os.WriteFile(at("public"), []byte("p"), 0o644))
	must(t, os.Mkdir(at("shared"), 0o755))
	must(t, os.Chmod(at("shared"), 0o777)) // past the umask
	cases := []struct {
		name, script string
		ok           bool
		output       string
	}{
		{"read a 0600 file of root's", "cat secret", false, "Permission denied"},
		{"read a 0644 file", "cat public", true, "p"},
		{"write a 0644 file of root's", "echo x >> public", false, "Permission denied"},
		{"create in root's 0755 directory", "touch mine", false, "Permission denied"},
		{"chmod root's file", "chmod 777 public", false, "Operation not permitted"},
		{"create in a 0777 directory", "echo hi > shared/mine && cat shared/mine", true, "hi"},
		{"list a directory", "ls shared", true, "mine"},
	}
	for _, tc := range cases {
		out, err := asNobody(mt.dir, tc.script)
		if (err == nil) != tc.ok || !strings.Contains(out, tc.output) {
			t.Errorf("%s: %v, output %q; want success=%v and %q", tc.name, err, out, tc.ok, tc.output)
		}
	}
	fi, err := os.Stat(at("shared/mine"))
	must(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("a file made by uid 65534 is owned by %d:%d", st.Uid, st.Gid)
	}
}

// TestMain runs a mount process in a child (role "mount", TestStaleMount's
// victim): it mounts, says so, and waits to be killed.
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"mount": helperMount, "call": helperCall})
}

func helperMount(spec string) error {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		return fmt.Errorf("helper: %q is not address|token|dir", spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: parts[0], Token: parts[1]})
	if err != nil {
		return err
	}
	if _, err := New(cl, parts[2], Config{}); err != nil {
		return err
	}
	fmt.Println("mounted")
	time.Sleep(time.Minute) // killed long before
	return errors.New("helper: not killed within a minute")
}

// TestStaleMount: a mount whose process died (kill -9) answers ENOTCONN;
// the next mount at the same place cleans it up and serves.
func TestStaleMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 1})
	must(t, err)
	defer c.Close()
	dir := t.TempDir()
	p := testproc.Start(t, testproc.Command("mount", c.Addr+"|"+c.Token+"|"+dir))
	cmd := p.Cmd
	p.Expect(t, "mounted", 30*time.Second)
	must(t, os.WriteFile(filepath.Join(dir, "before"), []byte("x"), 0o644))
	must(t, cmd.Process.Kill())
	cmd.Wait()
	if _, err := os.Stat(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("the dead mount answers %v, want ENOTCONN", err)
	}
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	must(t, err)
	defer cl.Close()
	m, err := New(cl, dir, Config{})
	if err != nil {
		t.Fatalf("mount over the stale one: %v", err)
	}
	defer m.Unmount()
	if b, err := os.ReadFile(filepath.Join(dir, "before")); err != nil || string(b) != "x" {
		t.Fatalf("after remounting: %q %v", b, err)
	}
}

// TestNoSpace: a full disk under the storage targets is ENOSPC to the
// writer (at a later write, or at fsync when the writes were all taken
// behind), not EIO, and what was written before stays readable.
func TestNoSpace(t *testing.T) {
	mnt := mountOnSmallDisks(t, "4m")
	small := fabrictest.RandBytes(13, 100<<10)
	must(t, os.WriteFile(filepath.Join(mnt, "small"), small, 0o644))
	f, err := os.Create(filepath.Join(mnt, "big"))
	must(t, err)
	defer f.Close()
	block := fabrictest.RandBytes(14, 256<<10)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ { // 16 MiB into 4 MiB
		_, werr = f.Write(block)
	}
	if werr == nil { // all taken behind (a slow machine): fsync says what became of them
		werr = f.Sync()
	}
	if errnoOf(werr) != syscall.ENOSPC {
		t.Fatalf("filling the disk: %v, want ENOSPC", werr)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "small")); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("a file written before the disk filled: %d bytes, %v", len(got), err)
	}
}

// mountOnSmallDisks mounts a new three-target cluster (chunks of 256 KiB)
// whose targets keep their chunks on tmpfs disks of size each.
func mountOnSmallDisks(t *testing.T, size string) string {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		chunks := filepath.Join(dir, fmt.Sprint("target-", i), "chunks")
		must(t, os.MkdirAll(chunks, 0o755))
		if err := syscall.Mount("tmpfs", chunks, "tmpfs", 0, "size="+size); err != nil {
			t.Skipf("cannot mount tmpfs (%v): run as root to test a full disk", err)
		}
		t.Cleanup(func() { syscall.Unmount(chunks, syscall.MNT_DETACH) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Targets: 3, ChunkSize: 256 << 10})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	must(t, err)
	t.Cleanup(func() { cl.Close() })
	mnt := t.TempDir()
	m, err := New(cl, mnt, Config{})
	must(t, err)
	t.Cleanup(func() { m.Unmount() })
	return mnt
}

// TestUnavailableIsEIO: a chain with no serving replica is EIO, with a log
// line that names the chunk and the chain.
func TestUnavailableIsEIO(t *testing.T) {
	var logs bytes.Buffer
	fs := NewFS(nil, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	err := fmt.Errorf("read /f: read chunk 7:3: chain 2: %w", sdk.ErrUnavailable)
	if st := fs.errno("read", 7, err); syscall.Errno(st) != syscall.EIO {
		t.Fatalf("status %v, want EIO", st)
	}
	if l := logs.String(); !strings.Contains(l, "no serving replica") || !strings.Contains(l, "chunk 7:3") || !strings.Contains(l, "chain 2") {
		t.Fatalf("log line: %q", l)
	}
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{fmt.Errorf("x: %w", sdk.ErrNotEmpty), syscall.ENOTEMPTY},
		{fmt.Errorf("x: %w", sdk.ErrNoSpace), syscall.ENOSPC},
		{fmt.Errorf("x: %w", sdk.ErrNameTooLong), syscall.ENAMETOOLONG},
		{errors.New("something else"), syscall.EIO},
	} {
		if st := fs.errno("op", 1, tc.err); syscall.Errno(st) != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, st, tc.want)
		}
	}
}

// TestForcedUnmount: aborting the connection (as `umount -f` or writing
// to fusectl's abort does) with a file still open ends serving, and what
// the file's writer wrote is published as on close.
func TestForcedUnmount(t *testing.T) {
	mt := mount(t, 64<<10)
	f, err := os.Create(filepath.Join(mt.dir, "open"))
	must(t, err)
	defer f.Close()
	_, err = f.Write(make([]byte, 5000))
	must(t, err)
	var st syscall.Stat_t
	must(t, syscall.Stat(mt.dir, &st))
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	if _, err := os.Stat(abort); err != nil { // fusectl is not mounted everywhere
		syscall.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, "")
	}
	if err := os.WriteFile(abort, []byte("1"), 0o200); err != nil {
		t.Skipf("cannot abort a FUSE connection here (%v)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mt.dir, syscall.MNT_DETACH) })
	select {
	case <-mt.m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still serving 10s after a forced unmount")
	}
	if in, err := mt.cl.Stat(context.Background(), "/open"); err != nil || in.Size() != 5000 {
		t.Fatalf("the length after a forced unmount: %v %v", in, err)
	}
}
