package meta

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
)

// TestMembership: a one-replica group grows to three through the admin API,
// the new replicas catch up on what was written before they joined, and a
// replica is removed again.
func TestMembership(t *testing.T) {
	dir := t.TempDir()
	start := func(id string) *Replica {
		r, err := StartReplica(ReplicaConfig{ID: id, Dir: filepath.Join(dir, id), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true, SnapshotEvery: 64})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	a := start("a")
	if err := a.Bootstrap(map[string]string{"a": a.Addr()}); err != nil {
		t.Fatal(err)
	}
	rs := []*Replica{a}
	for i := 0; i < 100; i++ {
		do(t, rs, &metapb.Command{Client: 1, Seq: uint64(i + 1), Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: RootIno, Name: fmt.Sprint("f", i)}}})
	}
	svc := NewService(a)
	ctx := context.Background()
	b, c := start("b"), start("c")
	for _, r := range []*Replica{b, c} {
		if _, err := svc.AddMember(ctx, &metapb.MemberRequest{Id: r.cfg.ID, Address: r.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.AddMember(ctx, &metapb.MemberRequest{Id: "x"}); err == nil {
		t.Fatal("a member without an address was accepted")
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.AppliedIndex() < a.AppliedIndex() || c.AppliedIndex() < a.AppliedIndex() {
		if time.Now().After(deadline) {
			t.Fatalf("new members never caught up: %d %d of %d", b.AppliedIndex(), c.AppliedIndex(), a.AppliedIndex())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range []*Replica{b, c} {
		if got := rootNames(t, r.Namespace()); len(got) != 100 {
			t.Fatalf("%s holds %d names after joining, want 100", r.cfg.ID, len(got))
		}
	}
	if m, _ := a.Members(); len(m) != 3 {
		t.Fatalf("members %v", m)
	}
	if _, err := svc.RemoveMember(ctx, &metapb.MemberRequest{Id: "c"}); err != nil {
		t.Fatal(err)
	}
	m, _ := a.Members()
	if len(m) != 2 || slices.ContainsFunc(m, func(s string) bool { return s[0] == 'c' }) {
		t.Fatalf("members after removing c: %v", m)
	}
	// The group of two still commits.
	do(t, []*Replica{a, b}, &metapb.Command{Client: 1, Seq: 101, Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirOp{Parent: RootIno, Name: "after"}}})
}
