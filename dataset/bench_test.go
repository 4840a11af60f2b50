package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// BenchmarkLoader: shuffled batches from a dataset in an embedded cluster
// (3 targets, 3 replicas, default 1 MiB chunks), read by a loader in the
// cluster's process (fabric=local) and by one reaching it over TCP, against pread
// of the same samples in the same shuffled order from local copies of the
// shard files in the page cache, with the same parallelism (Readers
// goroutines), alternating. x_pread is loader throughput ÷ pread's.
func BenchmarkLoader(b *testing.B) {
	for _, c := range []struct {
		name           string
		size, n, batch int
	}{{"size=4KiB", 4 << 10, 16384, 256}, {"size=1MiB", 1 << 20, 192, 16}} {
		for _, fab := range []string{"local", "tcp"} {
			b.Run(c.name+"/fabric="+fab, func(b *testing.B) { benchLoader(b, fab, c.size, c.n, c.batch) })
		}
	}
}

func benchLoader(b *testing.B, fab string, size, n, batch int) {
	const readers = 4
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Config{Dir: b.TempDir(), Targets: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cfg := sdk.Config{Cluster: c.Addr, Token: c.Token}
	if fab == "local" {
		cfg.Fabric = c.Fabric()
	}
	cl, err := sdk.Connect(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	w, err := Create(ctx, cl, "bench", []Column{{"data", Binary}, {"label", Int64}}, WriterOptions{ShardBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := w.Add(fabrictest.RandBytes(uint64(i), size), int64(i%10)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	d, err := Open(ctx, cl, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	local := localShards(b, d)

	l, err := d.Loader(LoaderConfig{BatchSize: batch, Shuffle: true, Seed: 1, Readers: readers})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	epoch := int64(0)
	op := func() {
		bt, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			epoch++
			l.SetEpoch(epoch)
			bt, err = l.Next(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		bt.Release()
	}

	// The baseline walks the same permutations, a batch at a time, each
	// batch's samples spread over the same number of goroutines.
	bufs := make([][]byte, readers)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	bEpoch, bPos := int64(0), int64(0)
	perm := NewPermutation(uint64(n), 1, 0, true)
	base := func() {
		if bPos+int64(batch) > int64(n) {
			bEpoch, bPos = bEpoch+1, 0
			perm = NewPermutation(uint64(n), 1, uint64(bEpoch), true)
		}
		var wg sync.WaitGroup
		for g := 0; g < readers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := g; k < batch; k += readers {
					s := int64(perm.At(uint64(bPos + int64(k))))
					off, ln := d.ix.varRange(s, 0)
					if _, err := local[d.ix.shardOf(s)].ReadAt(bufs[g][:ln], int64(off)); err != nil {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
		bPos += int64(batch)
	}
	x := fabrictest.Versus(b, op, base)
	b.ReportMetric(x, "x_pread")
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
	b.SetBytes(int64(batch * size))
}

// localShards copies a dataset's shard files to local files and opens them.
func localShards(b *testing.B, d *Dataset) []*os.File {
	dir := b.TempDir()
	var out []*os.File
	for i, s := range d.m.Shards {
		buf := make([]byte, s.Bytes)
		if _, err := d.shards[i].ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
			b.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("shard-%d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		out = append(out, f)
	}
	return out
}
