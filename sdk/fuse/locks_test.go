package fuse

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/server/cluster"
)

// TestLocksAcrossMounts: two mounts of one cluster (two clients, as on two
// machines) exclude each other with flock(2) and fcntl(2) locks as two
// processes on one machine do; F_GETLK names the holder; closing releases;
// a waiting lock is granted when the holder lets go.
func TestLocksAcrossMounts(t *testing.T) {
	a := mountWith(t, cluster.Config{Targets: 1, ChunkSize: 64 << 10, ElectionWait: -1})
	b := mountOn(t, a.c)
	must(t, os.WriteFile(filepath.Join(a.dir, "f"), []byte("locked"), 0o644))
	open := func(m *mounted) *os.File {
		f, err := os.OpenFile(filepath.Join(m.dir, "f"), os.O_RDWR, 0)
		must(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	fa, fb := open(a), open(b)
	fd := func(f *os.File) int { return int(f.Fd()) }

	// flock
	must(t, unix.Flock(fd(fa), unix.LOCK_EX|unix.LOCK_NB))
	if err := unix.Flock(fd(fb), unix.LOCK_EX|unix.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("flock on the other mount while held: %v, want EWOULDBLOCK", err)
	}
	if err := unix.Flock(fd(fb), unix.LOCK_SH|unix.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("shared flock while an exclusive one is held: %v", err)
	}
	must(t, unix.Flock(fd(fa), unix.LOCK_UN))
	must(t, unix.Flock(fd(fb), unix.LOCK_SH|unix.LOCK_NB))
	must(t, unix.Flock(fd(fa), unix.LOCK_SH|unix.LOCK_NB)) // shared with shared
	must(t, unix.Flock(fd(fb), unix.LOCK_UN))
	must(t, unix.Flock(fd(fa), unix.LOCK_UN))

	// POSIX byte ranges
	rng := func(typ int16, start, n int64) *unix.Flock_t {
		return &unix.Flock_t{Type: typ, Whence: 0, Start: start, Len: n}
	}
	must(t, unix.FcntlFlock(uintptr(fd(fa)), unix.F_SETLK, rng(unix.F_WRLCK, 0, 100)))
	if err := unix.FcntlFlock(uintptr(fd(fb)), unix.F_SETLK, rng(unix.F_RDLCK, 50, 10)); err != syscall.EAGAIN && err != syscall.EACCES {
		t.Fatalf("a read lock inside another mount's write lock: %v, want EAGAIN", err)
	}
	must(t, unix.FcntlFlock(uintptr(fd(fb)), unix.F_SETLK, rng(unix.F_WRLCK, 100, 100)))
	probe := rng(unix.F_WRLCK, 0, 10)
	must(t, unix.FcntlFlock(uintptr(fd(fb)), unix.F_GETLK, probe))
	if probe.Type != unix.F_WRLCK || probe.Start != 0 || probe.Len != 100 {
		t.Fatalf("F_GETLK: %+v, want the other mount's write lock on [0, 100)", probe)
	}
	// A waiting lock is granted once the holder closes its file.
	got := make(chan error, 1)
	go func() { got <- unix.FcntlFlock(uintptr(fd(fb)), unix.F_SETLKW, rng(unix.F_WRLCK, 0, 10)) }()
	select {
	case err := <-got:
		t.Fatalf("F_SETLKW returned while the lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	must(t, fa.Close())
	select {
	case err := <-got:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("F_SETLKW not granted after the holder closed its file")
	}
	fa2 := open(a)
	if err := unix.FcntlFlock(uintptr(fd(fa2)), unix.F_SETLK, rng(unix.F_RDLCK, 5, 1)); err != syscall.EAGAIN && err != syscall.EACCES {
		t.Fatalf("the waiter's lock does not hold: %v", err)
	}
}
