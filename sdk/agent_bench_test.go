package sdk

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicefs/sluice/shmring"
)

// BenchmarkAgentRead: random 4 KiB reads of a 64 MiB file in an embedded
// cluster, 128 a batch, one op per read. path=agent submits them through
// the local agent's shared-memory rings (512 in flight; the application
// side runs in this process, over the same socket, memfds and eventfds as
// from another); path=direct calls ReadBatch. Both report entries/s. With
// fabric=local the agent (or the direct client) sits in the cluster's
// process, as the one `sluice dev` hosts does; with fabric=tcp it is apart,
// as `sluice agent` and `sluice mount` are.
func BenchmarkAgentRead(b *testing.B) {
	for _, fab := range benchFabrics {
		b.Run("fabric="+fab, func(b *testing.B) { benchAgentRead(b, fab) })
	}
}

func benchAgentRead(b *testing.B, fab string) {
	const size, fileSize, batch, depth = 4 << 10, 64 << 20, 128, 512
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, r, _ := benchFile(ctx, b, fab, fileSize)
	b.Run("path=direct", func(b *testing.B) {
		buf, err := cl.NewBuffer(batch * size)
		if err != nil {
			b.Fatal(err)
		}
		defer buf.Release()
		rng := rand.New(rand.NewPCG(3, 4))
		ops := make([]ReadOp, batch)
		b.SetBytes(size)
		for done := 0; done < b.N; done += batch {
			for i := range ops {
				ops[i] = ReadOp{File: r, Off: int64(rng.IntN(fileSize/size)) * size, N: size, Buf: buf, BufOff: i * size}
			}
			if err := cl.ReadBatch(ctx, ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("path=agent", func(b *testing.B) {
		a, err := NewAgent(cl, AgentConfig{Path: filepath.Join(b.TempDir(), "agent.sock"), Batch: batch})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		ac, err := DialAgent(a.cfg.Path, depth*size, depth, true)
		if err != nil {
			b.Fatal(err)
		}
		defer ac.Close()
		file, _, err := ac.Open(ctx, "/bench.bin", false)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		free := make([]uint64, 0, depth)
		for i := range depth {
			free = append(free, uint64(i*size))
		}
		es := make([]shmring.Entry, 0, batch)
		cs := make([]shmring.Completion, depth)
		slotOf := map[uint64]uint64{}
		b.SetBytes(size)
		b.ResetTimer()
		for submitted, completed := 0, 0; completed < b.N; {
			es = es[:0]
			for len(free) > 0 && len(es) < batch && submitted+len(es) < b.N {
				id := uint64(submitted + len(es))
				es = append(es, shmring.Entry{File: file, Offset: uint64(rng.IntN(fileSize/size)) * size, Length: size,
					BufOff: free[len(free)-1], UserData: id, Op: shmring.OpRead})
				slotOf[id] = free[len(free)-1]
				free = free[:len(free)-1]
			}
			submitted += ac.Submit(es)
			for _, c := range cs[:ac.Reap(cs, time.Second)] {
				if c.Status != 0 || c.Length != size {
					b.Fatalf("completion %+v", c)
				}
				free = append(free, slotOf[c.UserData])
				delete(slotOf, c.UserData)
				completed++
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
}
