package meta

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// removed records what the collector asked storage to delete (the seam to
// storage is the only thing faked here).
type removed struct {
	mu   sync.Mutex
	inos []uint64
}

func (r *removed) RemoveChunks(ctx context.Context, f *metapb.Inode, from, to uint64) error {
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
	c := NewCollector(r, rm, CollectorConfig{Delay: time.Minute, Logger: quietSlog()})
	if n, err := c.Collect(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("collected %d before the delay: %v", n, err)
	}
	n, err := c.Collect(ctx, time.Now().Add(2*time.Minute))
	if err != nil || n != 1 || len(rm.inos) != 1 || rm.inos[0] != g.Ino {
		t.Fatalf("after the delay: collected %d (%v), %v; want only g, f's session is open", n, rm.inos, err)
	}
	// f's writer dies: its sessions are pruned, and f goes too. Its mark
	// covers the first chunk, which a writer stores without reserving it
	// first, so storage is asked to remove that.
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_PruneClient{PruneClient: 7}})
	n, err = c.Collect(ctx, time.Now().Add(2*time.Minute))
	if err != nil || n != 1 || len(rm.inos) != 2 || rm.inos[1] != f.Ino {
		t.Fatalf("after pruning: collected %d (storage asked for %v), %v", n, rm.inos, err)
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
	if err := ns.CloseSession(f.Ino, 2, 7, &big, nil, false, 2); err != nil {
		t.Fatal(err)
	}
	if open, _ := ns.HasSessions(f.Ino); !open {
		t.Fatal("closing client 2's session closed client 1's")
	}
	if err := ns.CloseSession(f.Ino, 1, 7, &small, nil, false, 3); err != nil {
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
	if err := ns.CloseSession(g.Ino, 1, 1, &final, nil, false, 5); err != nil {
		t.Fatal(err)
	}
	q := must(ns.Garbage(10))(t)
	if len(q) != 1 || q[0].Ino != g.Ino || q[0].Size != final {
		t.Fatalf("collector record %v, want inode %d with size %d", q, g.Ino, final)
	}
}

// ranges records the chunk ranges the collector asked storage to remove,
// and hangs on the files in stuck until their attempt's context ends.
type ranges struct {
	mu     sync.Mutex
	chunks map[uint64]uint64 // inode -> chunks asked for
	stuck  map[uint64]bool
}

func (r *ranges) RemoveChunks(ctx context.Context, f *metapb.Inode, from, to uint64) error {
	r.mu.Lock()
	stuck := r.stuck[f.Ino]
	if !stuck {
		r.chunks[f.Ino] += to - from
	}
	r.mu.Unlock()
	if stuck {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// TestCollectorCostAndStuckFile: a file truncated to the largest length
// and never written costs the collector nothing (it is not even queued); a written file
// costs its written chunks, however far it was then truncated; a file
// whose storage hangs holds up no other and is collected once storage
// answers again.
func TestCollectorCostAndStuckFile(t *testing.T) {
	r := soloReplica(t)
	rs := []*Replica{r}
	now := time.Now().UnixNano()
	create := func(name string) *metapb.Inode {
		return do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: name}}}).Inode
	}
	huge, wrote := create("huge"), create("wrote")
	stuck := create("stuck")
	maxSize, size, written := uint64(fsmeta.MaxFileSize), uint64(fsmeta.MaxFileSize), uint64(3<<20+1) // 4 chunks of 1 MiB
	do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Setattr{Setattr: &metapb.SetattrOp{Ino: huge.Ino, Size: &maxSize}}})
	for _, f := range []*metapb.Inode{wrote, stuck} {
		do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: f.Ino, Session: 1, Client: 1}}})
		do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_CloseSession{CloseSession: &metapb.SessionOp{Ino: f.Ino, Session: 1, Client: 1, Size: &size, Written: &written}}})
	}
	if in, _ := r.Namespace().Stat(wrote.Ino); in.Size != size || ChunksOf(in) != 4 {
		t.Fatalf("a file of length %d written to %d: %d chunks to collect, want 4", in.Size, written, ChunksOf(in))
	}
	if in, _ := r.Namespace().Stat(huge.Ino); in.Size != maxSize || ChunksOf(in) != 0 {
		t.Fatalf("a file truncated to %d, never written: %d chunks to collect, want 0", in.Size, ChunksOf(in))
	}
	for _, name := range []string{"huge", "wrote", "stuck"} {
		do(t, rs, &metapb.Command{NowNs: now, Op: &metapb.Command_Unlink{Unlink: &metapb.RemoveOp{Parent: RootIno, Name: name}}})
	}
	if q, _ := r.Namespace().Garbage(10); len(q) != 2 || q[0].Ino == huge.Ino || q[1].Ino == huge.Ino {
		t.Fatalf("collector queue %v: want the two written files, not the one never written", q)
	}
	rm := &ranges{chunks: map[uint64]uint64{}, stuck: map[uint64]bool{stuck.Ino: true}}
	m := NewCollectorMetrics()
	c := NewCollector(r, rm, CollectorConfig{Delay: time.Millisecond, Workers: 2, FileTimeout: 200 * time.Millisecond, Metrics: m, Logger: quietSlog()})
	ctx := context.Background()
	n, err := c.Collect(ctx, time.Now().Add(time.Second))
	if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("collected %d (%v), want the file whose storage answers and the stuck one's timeout", n, err)
	}
	if rm.chunks[huge.Ino] != 0 || rm.chunks[wrote.Ino] != 4 {
		t.Fatalf("chunks removed: %v; want none of the huge file, 4 of the written one", rm.chunks)
	}
	rm.mu.Lock()
	rm.stuck = nil
	rm.mu.Unlock()
	if n, err := c.Collect(ctx, time.Now().Add(time.Second)); n != 1 || err != nil {
		t.Fatalf("once storage answers: collected %d, %v", n, err)
	}
	if got := testutil.ToFloat64(m.chunks); got != 8 {
		t.Fatalf("sluice_meta_collector_chunks_removed_total %v, want 8", got)
	}
	if f, e := testutil.ToFloat64(m.files), testutil.ToFloat64(m.errors); f != 2 || e != 1 {
		t.Fatalf("files_total %v, errors_total %v; want 2 and 1", f, e)
	}
	if n, err := c.Collect(ctx, time.Now().Add(time.Second)); n != 0 || err != nil || testutil.ToFloat64(m.pending) != 0 {
		t.Fatalf("an empty queue: collected %d, %v, pending %v", n, err, testutil.ToFloat64(m.pending))
	}
}

// TestDeadWritersEnded: the write sessions of a client the leader has not
// heard from for a lease are ended, and a file it held that was unlinked
// is then collected; a client that renewed, and one whose session is
// newer than a lease, keep theirs.
func TestDeadWritersEnded(t *testing.T) {
	r := soloReplica(t)
	rs := []*Replica{r}
	const lease = time.Minute
	t0 := time.Now()
	files := map[uint64]*metapb.Inode{} // client -> its file
	for client, opened := range map[uint64]time.Time{7: t0, 8: t0, 9: t0.Add(90 * time.Second)} {
		f := do(t, rs, &metapb.Command{NowNs: t0.UnixNano(), Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: fmt.Sprint(client)}}}).Inode
		do(t, rs, &metapb.Command{NowNs: opened.UnixNano(), Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: f.Ino, Session: 1, Client: client}}})
		files[client] = f
	}
	m := NewCollectorMetrics()
	rm := &removed{}
	c := NewCollector(r, rm, CollectorConfig{Delay: time.Minute, ClientLease: lease, Metrics: m, Logger: quietSlog()})
	ctx := context.Background()
	if n, err := c.EndDeadWriters(ctx, t0.Add(lease/2)); err != nil || n != 0 {
		t.Fatalf("within the lease: ended %d, %v", n, err)
	}
	now := t0.Add(100 * time.Second)
	r.locks.renew(r.raft.CurrentTerm(), 8, nil, 0, now.Add(-10*time.Second)) // 8 renews; 7 has not since t0; 9 opened at t0+90s
	if n, err := c.EndDeadWriters(ctx, now); err != nil || n != 1 {
		t.Fatalf("ended %d clients, %v; want client 7 only", n, err)
	}
	for client, want := range map[uint64]bool{7: false, 8: true, 9: true} {
		if open, err := r.Namespace().HasSessions(files[client].Ino); err != nil || open != want {
			t.Errorf("client %d's session open: %v (%v), want %v", client, open, err, want)
		}
	}
	if got := testutil.ToFloat64(m.deadWriters); got != 1 {
		t.Errorf("dead_writers_total %v, want 1", got)
	}
	// Client 7's file, unlinked, is collected now that nothing holds it.
	do(t, rs, &metapb.Command{NowNs: now.UnixNano(), Op: &metapb.Command_Unlink{Unlink: &metapb.RemoveOp{Parent: RootIno, Name: "7"}}})
	if n, err := c.Collect(ctx, now.Add(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("collected %d after its writer was ended, %v", n, err)
	}
	// The renewals of a live client come through KeepOpen.
	svc := NewService(r)
	before := r.locks.lastHeard(9)
	if _, err := svc.KeepOpen(ctx, &metapb.KeepOpenRequest{Client: 9}); err != nil {
		t.Fatal(err)
	}
	if !r.locks.lastHeard(9).After(before) {
		t.Fatal("KeepOpen did not count as hearing from the client")
	}
}

// TestWrittenMarkReserved: a writer's reservation (keep, a written mark and
// no size) raises the mark and nothing else, on a file or on an unlinked
// file's collector record; ending a dead client's sessions gives the files
// it held a mark of at least their first chunk.
func TestWrittenMarkReserved(t *testing.T) {
	ns := newNS(t)
	f := must(ns.Create(RootIno, "f", at))(t)
	g := must(ns.Create(RootIno, "g", at))(t)
	for _, in := range []*metapb.Inode{f, g} {
		if err := ns.OpenSession(in.Ino, 5, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	mark := uint64(8 << 20)
	if err := ns.CloseSession(f.Ino, 5, 1, nil, &mark, true, 9999); err != nil {
		t.Fatal(err)
	}
	in := must(ns.Stat(f.Ino))(t)
	if Written(in) != mark || in.Size != 0 || in.MtimeNs != f.MtimeNs {
		t.Fatalf("after a reservation: mark %d size %d mtime %d, want %d, 0, %d", Written(in), in.Size, in.MtimeNs, mark, f.MtimeNs)
	}
	if open, _ := ns.HasSessions(f.Ino); !open {
		t.Fatal("a reservation ended the session")
	}
	if err := ns.Unlink(RootIno, "g", 3000); err != nil {
		t.Fatal(err)
	}
	if err := ns.PruneClient(5); err != nil {
		t.Fatal(err)
	}
	if w := Written(must(ns.Stat(f.Ino))(t)); w != mark {
		t.Fatalf("a pruned file's mark %d, want its reservation %d kept", w, mark)
	}
	q := must(ns.Garbage(10))(t)
	if len(q) != 1 || q[0].Ino != g.Ino || ChunksOf(q[0]) != 1 {
		t.Fatalf("collector queue %v, want g with its first chunk to remove", q)
	}
}
