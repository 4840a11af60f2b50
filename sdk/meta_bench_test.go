package sdk

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/server/cluster"
)

// BenchmarkMetaOps: the metadata calls a small file costs, one at a time
// (as `cp` and `rm` make them), from a client over TCP to an embedded
// cluster (one metadata replica, 3 targets, chains of 3): create and open
// for writing, write 4 KiB and close, stat, unlink. Each reports its
// microseconds per call; the Raft log's synced append is one of them.
// Then 8 writers at once in one directory, files of 4 KiB and empty ones
// (create and close): files/s.
func BenchmarkMetaOps(b *testing.B) {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Config{Dir: b.TempDir(), Targets: 3})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	cl, err := Connect(ctx, Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	block := make([]byte, 4096)
	run := 0
	b.Run("file", func(b *testing.B) {
		run++
		dir, err := cl.MkdirAt(ctx, 0, fmt.Sprintf("/m%d", run), Owner{Mode: 0o755})
		if err != nil {
			b.Fatal(err)
		}
		var create, write, close, stat, unlink time.Duration
		for i := 0; i < b.N; i++ {
			name := fmt.Sprint("f", i)
			t0 := time.Now()
			f, err := cl.CreateOpenAt(ctx, dir.Ino(), name, Owner{Mode: 0o644})
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := f.WriteAt(block, 0); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			if _, err := cl.StatAt(ctx, dir.Ino(), name); err != nil {
				b.Fatal(err)
			}
			t4 := time.Now()
			if err := cl.UnlinkAt(ctx, dir.Ino(), name); err != nil {
				b.Fatal(err)
			}
			t5 := time.Now()
			create, write, close, stat, unlink = create+t1.Sub(t0), write+t2.Sub(t1), close+t3.Sub(t2), stat+t4.Sub(t3), unlink+t5.Sub(t4)
		}
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
		b.ReportMetric(us(create), "create_us")
		b.ReportMetric(us(write), "write4k_us")
		b.ReportMetric(us(close), "close_us")
		b.ReportMetric(us(stat), "stat_us")
		b.ReportMetric(us(unlink), "unlink_us")
	})
	for _, size := range []int{4096, 0} {
		b.Run(fmt.Sprintf("writers=8/size=%d", size), func(b *testing.B) {
			run++
			dir, err := cl.MkdirAt(ctx, 0, fmt.Sprintf("/m%d", run), Owner{Mode: 0o755})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(4) // 8 writers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					f, err := cl.CreateOpenAt(ctx, dir.Ino(), fmt.Sprint("f", n.Add(1)), Owner{Mode: 0o644})
					if err == nil && size > 0 {
						_, err = f.WriteAt(block[:size], 0)
					}
					if err == nil {
						err = f.Close()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "files/s")
		})
	}
}
