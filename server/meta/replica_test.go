package meta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/sluicefs/sluice/proto/metapb"
)

func startReplicas(t *testing.T, n int) ([]*Replica, []ReplicaConfig) {
	dir := t.TempDir()
	var rs []*Replica
	var cfgs []ReplicaConfig
	members := map[string]string{}
	for i := 0; i < n; i++ {
		cfg := ReplicaConfig{ID: fmt.Sprint("m", i), Dir: filepath.Join(dir, fmt.Sprint(i)), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true, SnapshotEvery: 64}
		r, err := StartReplica(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Bind = r.Addr()
		rs, cfgs = append(rs, r), append(cfgs, cfg)
		members[cfg.ID] = r.Addr()
	}
	if err := rs[0].Bootstrap(members); err != nil {
		t.Fatal(err)
	}
	return rs, cfgs
}

// do applies cmd through whichever replica leads, retrying the same
// command (same client and sequence number) until it is acknowledged.
func do(t *testing.T, rs []*Replica, cmd *metapb.Command) *metapb.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			if r == nil || !r.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := r.Do(ctx, proto_clone(cmd))
			cancel()
			if err == nil {
				return res
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("command %v never acknowledged", cmd)
	return nil
}

func proto_clone(c *metapb.Command) *metapb.Command {
	return &metapb.Command{NowNs: c.NowNs, Client: c.Client, Seq: c.Seq, Op: c.Op}
}

func (r *Replica) dump(t *testing.T) map[string]string {
	it, err := r.fsmDB.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	m := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	return m
}

func rootNames(t *testing.T, ns *Namespace) []string {
	ents, _, err := ns.List(RootIno, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	return names
}

// TestReplicatedNamespace: three replicas over TCP; the leader is killed
// during a mixed create/rename/unlink load; every acknowledged operation
// survives, retries apply once, the replicas' state machines end identical,
// and the killed replica restarts from disk and catches up.
func TestReplicatedNamespace(t *testing.T) {
	rs, cfgs := startReplicas(t, 3)
	defer func() {
		for _, r := range rs {
			if r != nil {
				r.Close()
			}
		}
	}()
	model := map[string]bool{}
	const client = 77
	seq := uint64(0)
	next := func(op any) *metapb.Command {
		seq++
		c := &metapb.Command{Client: client, Seq: seq, NowNs: int64(seq) * 1000}
		switch o := op.(type) {
		case *metapb.CreateOp:
			c.Op = &metapb.Command_Create{Create: o}
		case *metapb.RenameOp:
			c.Op = &metapb.Command_Rename{Rename: o}
		case *metapb.RemoveOp:
			c.Op = &metapb.Command_Unlink{Unlink: o}
		}
		return c
	}
	killed := -1
	for i := 0; i < 150; i++ {
		name := fmt.Sprint("f", i)
		if res := do(t, rs, next(&metapb.CreateOp{Parent: RootIno, Name: name, Mode: 0o644})); res.Code != 0 {
			t.Fatalf("create %s: %s", name, res.Error)
		}
		model[name] = true
		if old := fmt.Sprint("f", i-1); i%3 == 1 && model[old] {
			if res := do(t, rs, next(&metapb.RenameOp{SrcParent: RootIno, SrcName: old, DstParent: RootIno, DstName: "r" + old})); res.Code != 0 {
				t.Fatalf("rename %s: %s", old, res.Error)
			}
			delete(model, old)
			model["r"+old] = true
		}
		if i%4 == 3 && model[name] {
			if res := do(t, rs, next(&metapb.RemoveOp{Parent: RootIno, Name: name})); res.Code != 0 {
				t.Fatalf("unlink %s: %s", name, res.Error)
			}
			delete(model, name)
		}
		if i == 60 {
			for k, r := range rs {
				if r.IsLeader() {
					r.Close()
					rs[k], killed = nil, k
					break
				}
			}
		}
	}
	if killed < 0 {
		t.Fatal("no leader was killed")
	}
	// A retry of an acknowledged command returns its first result and
	// changes nothing.
	again := do(t, rs, &metapb.Command{Client: client, Seq: seq, Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: "never"}}})
	if again.Seq != seq || again.Code != 0 {
		t.Fatalf("retry of the last command: %v", again)
	}
	var want []string
	for n := range model {
		want = append(want, n)
	}
	slices.Sort(want)

	r, err := StartReplica(cfgs[killed])
	if err != nil {
		t.Fatalf("restart replica %d: %v", killed, err)
	}
	rs[killed] = r
	// Wait for every replica to apply the same log.
	deadline := time.Now().Add(20 * time.Second)
	for {
		same := true
		for _, x := range rs {
			same = same && x.AppliedIndex() == rs[0].AppliedIndex()
		}
		if same && rs[0].AppliedIndex() > 0 {
			time.Sleep(100 * time.Millisecond)
			if rs[0].AppliedIndex() == rs[1].AppliedIndex() && rs[1].AppliedIndex() == rs[2].AppliedIndex() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas never converged: %d %d %d", rs[0].AppliedIndex(), rs[1].AppliedIndex(), rs[2].AppliedIndex())
		}
		time.Sleep(20 * time.Millisecond)
	}
	first := rs[0].dump(t)
	for k, x := range rs {
		if got := rootNames(t, x.Namespace()); !slices.Equal(got, want) {
			t.Fatalf("replica %d holds %d names, want %d", k, len(got), len(want))
		}
		d := x.dump(t)
		if len(d) != len(first) {
			t.Fatalf("replica %d state has %d keys, replica 0 %d", k, len(d), len(first))
		}
		for key, v := range first {
			if d[key] != v {
				t.Fatalf("replica %d differs from replica 0 at key %q", k, key)
			}
		}
	}
	// A linearizable read on the leader sees the last write.
	for _, x := range rs {
		if !x.IsLeader() {
			continue
		}
		err := x.Read(context.Background(), func(ns *Namespace) error {
			if got := rootNames(t, ns); !slices.Equal(got, want) {
				return fmt.Errorf("leader read %d names", len(got))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range rs {
		if !x.IsLeader() {
			if err := x.Read(context.Background(), func(*Namespace) error { return nil }); !errors.Is(err, fsmeta.ErrNotLeader) {
				t.Fatalf("read on a follower: %v, want ErrNotLeader", err)
			}
		}
	}
}

func quietSlog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSnapshotEvery: a snapshot writes the whole namespace, so a replica
// takes one only after SnapshotEvery entries (default 8192): none after a
// few hundred by default, and some with SnapshotEvery 64, as tests ask.
func TestSnapshotEvery(t *testing.T) {
	snapshotted := map[uint64]bool{}
	for _, every := range []uint64{64, 0} {
		cfg := ReplicaConfig{ID: "s", Dir: t.TempDir(), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true, SnapshotEvery: every}
		r, err := StartReplica(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Bootstrap(map[string]string{"s": r.Addr()}); err != nil {
			t.Fatal(err)
		}
		rs := []*Replica{r}
		for i := range 300 {
			if res := do(t, rs, &metapb.Command{Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: fmt.Sprint("f", i)}}}); res.Code != 0 {
				t.Fatalf("create: %v", res)
			}
		}
		// 64 entries are looked for every 0.24 s (Raft adds up to as much
		// again); the old test settings looked every 100 ms.
		wait := 6 * time.Second
		if every == 0 {
			wait = 2 * time.Second
		}
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if r.raft.Stats()["last_snapshot_index"] != "0" {
				snapshotted[every] = true
				break
			}
		}
		r.Close()
	}
	if snapshotted[0] {
		t.Error("a replica with the default SnapshotEvery snapshotted after 300 entries")
	}
	if !snapshotted[64] {
		t.Error("a replica with SnapshotEvery 64 took no snapshot after 300 entries")
	}
}
