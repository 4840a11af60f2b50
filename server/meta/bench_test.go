package meta

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
)

// BenchmarkMeta: namespace operations through the Raft group, from 16
// concurrent callers (so that Raft can batch), on 1 or 3 replicas on this
// machine over loopback TCP, every log append synced to disk.
func BenchmarkMeta(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		for _, op := range []string{"create", "stat"} {
			b.Run(fmt.Sprintf("op=%s/replicas=%d", op, replicas), func(b *testing.B) {
				rs := benchGroup(b, replicas)
				var leader *Replica
				for deadline := time.Now().Add(10 * time.Second); leader == nil && time.Now().Before(deadline); {
					for _, r := range rs {
						if r.IsLeader() {
							leader = r
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
				if leader == nil {
					b.Fatal("no leader")
				}
				ctx := context.Background()
				dir, err := leader.Do(ctx, &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirOp{Parent: RootIno, Name: "bench", Mode: 0o755}}})
				if err != nil || dir.Code != 0 {
					b.Fatal(err, dir)
				}
				parent := dir.Inode.Ino
				if op == "stat" {
					for i := 0; i < 100; i++ {
						leader.Do(ctx, &metapb.Command{Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: parent, Name: fmt.Sprint("s", i)}}})
					}
				}
				var n atomic.Int64
				b.SetParallelism(8) // 16 callers on 2 cores
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						if op == "create" {
							res, err := leader.Do(ctx, &metapb.Command{Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: parent, Name: fmt.Sprint("f", i)}}})
							if err != nil || res.Code != 0 {
								b.Error(err, res)
								return
							}
							continue
						}
						err := leader.Read(ctx, func(ns *Namespace) error {
							_, err := ns.Lookup(parent, fmt.Sprint("s", i%100))
							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}

func benchGroup(b *testing.B, n int) []*Replica {
	dir := b.TempDir()
	var rs []*Replica
	members := map[string]string{}
	for i := 0; i < n; i++ {
		r, err := StartReplica(ReplicaConfig{ID: fmt.Sprint("b", i), Dir: fmt.Sprintf("%s/%d", dir, i), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		rs = append(rs, r)
		members[fmt.Sprint("b", i)] = r.Addr()
	}
	if err := rs[0].Bootstrap(members); err != nil {
		b.Fatal(err)
	}
	return rs
}
