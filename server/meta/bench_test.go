package meta

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
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

// BenchmarkMetaSnapshots: creates from 16 callers on one replica whose
// namespace already holds 100,000 files (SLUICE_META_BENCH_FILES), snapshotting every 8192 entries
// (the default) or every 64 (what every control plane did before the
// setting). Each snapshot writes the whole namespace. Run with a fixed
// count, as the fill is not timed but is repeated for every b.N tried:
// -benchtime 20000x.
func BenchmarkMetaSnapshots(b *testing.B) {
	for _, every := range []uint64{0, 64} {
		b.Run(fmt.Sprintf("every=%d", every), func(b *testing.B) {
			r, err := StartReplica(ReplicaConfig{ID: "b", Dir: b.TempDir(), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true, SnapshotEvery: every})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if err := r.Bootstrap(map[string]string{"b": r.Addr()}); err != nil {
				b.Fatal(err)
			}
			for !r.IsLeader() {
				time.Sleep(10 * time.Millisecond)
			}
			ctx := context.Background()
			mkdir := func(name string) uint64 {
				res, err := r.Do(ctx, &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirOp{Parent: RootIno, Name: name, Mode: 0o755}}})
				if err != nil || res.Code != 0 {
					b.Fatal(err, res)
				}
				return res.Inode.Ino
			}
			create := func(parent uint64, i int64) error {
				res, err := r.Do(ctx, &metapb.Command{Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: parent, Name: fmt.Sprint("f", i)}}})
				if err == nil && res.Code != 0 {
					err = fmt.Errorf("create: %v", res)
				}
				return err
			}
			fill, parent := mkdir("fill"), mkdir("bench")
			files := int64(100000)
			if v, err := strconv.ParseInt(os.Getenv("SLUICE_META_BENCH_FILES"), 10, 64); err == nil {
				files = v
			}
			var n atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := n.Add(1); i <= files; i = n.Add(1) {
						if err := create(fill, i); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			n.Store(0)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := create(parent, n.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
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
