package meta

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
)

// removed records what the collector asked storage to delete (the seam to
// storage is the only thing faked here).
type removed struct {
	mu   sync.Mutex
	inos []uint64
}

func (r *removed) RemoveChunks(ctx context.Context, f *metapb.Inode) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inos = append(r.inos, f.Ino)
	return nil
}

func soloReplica(t *testing.T) *Replica {
	r, err := StartReplica(ReplicaConfig{ID: "solo", Dir: filepath.Join(t.TempDir(), "r"), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.Bootstrap(map[string]string{"solo": r.Addr()})
	for deadline := time.Now().Add(10 * time.Second); !r.IsLeader(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	return r
}

func TestSessionsAndCollector(t *testing.T) {
	r := soloReplica(t)
	rs := []*Replica{r}
	now := time.Now().UnixNano()
	f := do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: "f"}}}).Inode
	g := do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: "g"}}}).Inode
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: f.Ino, Session: 1, Client: 7}}})
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: g.Ino, Session: 2, Client: 8}}})
	size := uint64(5 << 20)
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_CloseSession{CloseSession: &metapb.SessionOp{Ino: g.Ino, Session: 2, Client: 8, Size: &size}}})
	if in, _ := r.Namespace().Stat(g.Ino); in.Size != 5<<20 {
		t.Fatalf("length after close: %d", in.Size)
	}
	if res := do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: RootIno, Session: 3, Client: 7}}}); res.Code == 0 {
		t.Fatal("a write session on a directory")
	}
	for _, name := range []string{"f", "g"} {
		do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Unlink{Unlink: &metapb.RemoveOp{Parent: RootIno, Name: name}}})
	}
	rm := &removed{}
	ctx := context.Background()
	c := NewCollector(r, rm, time.Minute, quietSlog())
	if n, err := c.Collect(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("collected %d before the delay: %v", n, err)
	}
	n, err := c.Collect(ctx, time.Now().Add(2*time.Minute))
	if err != nil || n != 1 || len(rm.inos) != 1 || rm.inos[0] != g.Ino {
		t.Fatalf("after the delay: collected %d (%v), %v; want only g, f's session is open", n, rm.inos, err)
	}
	// f's writer dies: its sessions are pruned, and f goes too.
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_PruneClient{PruneClient: 7}})
	n, err = c.Collect(ctx, time.Now().Add(2*time.Minute))
	if err != nil || n != 1 || len(rm.inos) != 2 || rm.inos[1] != f.Ino {
		t.Fatalf("after pruning: collected %d (%v), %v", n, rm.inos, err)
	}
	if left, _ := r.Namespace().Garbage(10); len(left) != 0 {
		t.Fatalf("still queued: %v", left)
	}
}

// TestSessionSemantics: a close never shrinks a file another writer grew;
// sessions of different clients with the same number are distinct; a file
// unlinked while open hands its final length to the collector.
func TestSessionSemantics(t *testing.T) {
	ns := newNS(t)
	f := must(ns.Create(RootIno, "f", at))(t)
	for _, client := range []uint64{1, 2} {
		if err := ns.OpenSession(f.Ino, client, 7, 1); err != nil { // same session number
			t.Fatal(err)
		}
	}
	big, small := uint64(1000), uint64(0)
	if err := ns.CloseSession(f.Ino, 2, 7, &big, false, 2); err != nil {
		t.Fatal(err)
	}
	if open, _ := ns.HasSessions(f.Ino); !open {
		t.Fatal("closing client 2's session closed client 1's")
	}
	if err := ns.CloseSession(f.Ino, 1, 7, &small, false, 3); err != nil {
		t.Fatal(err)
	}
	if in := must(ns.Stat(f.Ino))(t); in.Size != 1000 {
		t.Fatalf("size %d after a later close with a smaller length, want 1000", in.Size)
	}
	g := must(ns.Create(RootIno, "g", at))(t)
	ns.OpenSession(g.Ino, 1, 1, 1)
	if err := ns.Unlink(RootIno, "g", 4); err != nil {
		t.Fatal(err)
	}
	final := uint64(5 << 20)
	if err := ns.CloseSession(g.Ino, 1, 1, &final, false, 5); err != nil {
		t.Fatal(err)
	}
	q := must(ns.Garbage(10))(t)
	if len(q) != 1 || q[0].Ino != g.Ino || q[0].Size != final {
		t.Fatalf("collector record %v, want inode %d with size %d", q, g.Ino, final)
	}
}
