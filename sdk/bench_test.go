package sdk

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/server/cluster"
)

// BenchmarkReadAt: 1 MiB reads at random chunk-aligned offsets of a 64 MiB
// file in an embedded cluster (3 targets, 3 replicas, TCP fabric), against
// pread of the same bytes from a local file in the page cache, alternating.
func BenchmarkReadAt(b *testing.B) {
	const size, fileSize = 1 << 20, 64 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: b.TempDir(), Targets: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, err := Connect(ctx, Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	data := fabrictest.RandBytes(1, fileSize)
	f, err := cl.Create(ctx, "/bench.bin")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		b.Fatal(err)
	}
	f.Close()
	r, err := cl.Open(ctx, "/bench.bin")
	if err != nil {
		b.Fatal(err)
	}
	local := filepath.Join(b.TempDir(), "bench.bin")
	os.WriteFile(local, data, 0o644)
	lf, _ := os.Open(local)
	defer lf.Close()
	buf, lbuf := make([]byte, size), make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	op := func() {
		off := int64(rng.IntN(fileSize/size)) * size
		if _, err := r.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	base := func() {
		off := int64(rng.IntN(fileSize/size)) * size
		if _, err := lf.ReadAt(lbuf, off); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	b.ReportMetric(fabrictest.Versus(b, op, base), "x_pread")
}
