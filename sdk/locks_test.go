package sdk

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/server/cluster"
)

// TestLocks: two clients' locks exclude each other, TestLockAt names the
// holder, a waiting LockAt is granted once the holder unlocks, and a
// client's Close gives its locks up.
func TestLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startClusterWith(t, cluster.Config{Targets: 1, ElectionWait: -1})
	defer c.Close()
	a, b := connect(t, c), connect(t, c)
	defer b.Close()
	if err := a.WriteFile(ctx, "/f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	fi, err := a.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Ino()
	whole := LockInfo{Type: LockWrite, End: fsmeta.LockEnd, Owner: 1, Pid: 42}
	if err := a.LockAt(ctx, ino, whole, false); err != nil {
		t.Fatal(err)
	}
	if err := b.LockAt(ctx, ino, LockInfo{Type: LockRead, Start: 5, End: 5, Owner: 1}, false); !errors.Is(err, ErrLocked) || Errno(err) != syscall.EAGAIN {
		t.Fatalf("b's lock while a holds one: %v", err)
	}
	if k, err := b.TestLockAt(ctx, ino, LockInfo{Type: LockRead, Owner: 1, End: 0}); err != nil || k == nil || k.Pid != 42 || k.Type != LockWrite {
		t.Fatalf("TestLockAt: %+v, %v", k, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- b.LockAt(ctx, ino, LockInfo{Type: LockWrite, End: 9, Owner: 1}, true) }()
	time.Sleep(200 * time.Millisecond)
	if err := a.LockAt(ctx, ino, LockInfo{Type: LockUnlock, End: fsmeta.LockEnd, Owner: 1}, false); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiting lock: %v", err)
	}
	// b holds [0, 9]; a takes [10, end] and closes: its lock goes at once.
	if err := a.LockAt(ctx, ino, LockInfo{Type: LockWrite, Start: 10, End: fsmeta.LockEnd, Owner: 1}, false); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := b.LockAt(ctx, ino, LockInfo{Type: LockWrite, Start: 10, End: 20, Owner: 1}, false); err != nil {
		t.Fatalf("a lock a closed client held: %v", err)
	}
}
