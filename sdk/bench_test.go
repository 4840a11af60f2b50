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

// benchFabrics are the two ways a client reaches an embedded cluster's
// storage: from its own process (the cluster's fabric/local network) and
// from another (TCP).
var benchFabrics = []string{"local", "tcp"}

// benchFile starts an embedded cluster (3 targets, 3 replicas), connects a
// client over fabricName, writes fileSize random bytes to one file in it and
// the same bytes to a local file, and returns the client, the open Sluice
// file and the open local file (the baseline's, in the page cache).
func benchFile(ctx context.Context, b *testing.B, fabricName string, fileSize int) (*Client, *File, *os.File) {
	b.Helper()
	c, err := cluster.Start(ctx, cluster.Config{Dir: b.TempDir(), Targets: 3})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	cfg := Config{Cluster: c.Addr, Token: c.Token}
	if fabricName == "local" {
		cfg.Fabric = c.Fabric()
	}
	cl, err := Connect(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	data := fabrictest.RandBytes(1, fileSize)
	if err := cl.WriteFile(ctx, "/bench.bin", data); err != nil {
		b.Fatal(err)
	}
	r, err := cl.Open(ctx, "/bench.bin")
	if err != nil {
		b.Fatal(err)
	}
	local := filepath.Join(b.TempDir(), "bench.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		b.Fatal(err)
	}
	lf, err := os.Open(local)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lf.Close() })
	return cl, r, lf
}

// BenchmarkReadAt: 1 MiB reads at random chunk-aligned offsets of a 64 MiB
// file in an embedded cluster, from a client in its process (fabric=local)
// and one reaching it over TCP, against pread of the same bytes from a local
// file in the page cache, alternating.
func BenchmarkReadAt(b *testing.B) {
	for _, fab := range benchFabrics {
		b.Run("size=1MiB/fabric="+fab, func(b *testing.B) { benchReadAt(b, fab) })
	}
}

func benchReadAt(b *testing.B, fab string) {
	const size, fileSize = 1 << 20, 64 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, r, lf := benchFile(ctx, b, fab, fileSize)
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

// BenchmarkBatchedRead: batches of 64 random 4 KiB reads of a 64 MiB file
// into a registered buffer (one call per storage node), against 64 preads
// of 4 KiB from a local file in the page cache, alternating.
func BenchmarkBatchedRead(b *testing.B) {
	for _, fab := range benchFabrics {
		b.Run("size=4KiB/fabric="+fab, func(b *testing.B) { benchBatchedRead(b, fab) })
	}
}

func benchBatchedRead(b *testing.B, fab string) {
	const size, fileSize, batch = 4 << 10, 64 << 20, 64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, r, lf := benchFile(ctx, b, fab, fileSize)
	buf, err := cl.NewBuffer(batch * size)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Release()
	lbuf := make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 4))
	ops := make([]ReadOp, batch)
	op := func() {
		for i := range ops {
			ops[i] = ReadOp{File: r, Off: int64(rng.IntN(fileSize/size)) * size, N: size, Buf: buf, BufOff: i * size}
		}
		if err := cl.ReadBatch(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	base := func() {
		for i := 0; i < batch; i++ {
			if _, err := lf.ReadAt(lbuf, int64(rng.IntN(fileSize/size))*size); err != nil {
				b.Fatal(err)
			}
		}
	}
	x := fabrictest.Versus(b, op, base)
	b.ReportMetric(x, "x_pread")
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "iops")
}

// BenchmarkReadAtCeiling: the most BenchmarkReadAt can reach on this
// machine over TCP. A plain loopback socket moving 1 MiB per request (the
// x_socket baseline of fabric and storage, with nothing else to do) against
// pread of 1 MiB at random offsets of a local file in the page cache,
// alternating. A read that crosses a socket does at least this exchange's
// work: two copies of every byte (into the socket and out of it) where
// pread makes one.
func BenchmarkReadAtCeiling(b *testing.B) {
	const size, fileSize = 1 << 20, 64 << 20
	local := filepath.Join(b.TempDir(), "bench.bin")
	if err := os.WriteFile(local, fabrictest.RandBytes(1, fileSize), 0o644); err != nil {
		b.Fatal(err)
	}
	lf, err := os.Open(local)
	if err != nil {
		b.Fatal(err)
	}
	defer lf.Close()
	lbuf := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	base := func() {
		if _, err := lf.ReadAt(lbuf, int64(rng.IntN(fileSize/size))*size); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	b.ReportMetric(fabrictest.Versus(b, fabrictest.SocketExchange(b, 8, size), base), "x_pread")
}
