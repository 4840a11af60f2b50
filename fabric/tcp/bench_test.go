package tcp

import (
	"context"
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The benchmarks report their throughput as a ratio to the same bytes moved
// over a plain loopback TCP socket in the same process and run, so a shared,
// noisy machine does not skew the figure.

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

func benchPair(b *testing.B, cfg Config) (srv, cli fabric.Endpoint) {
	tr := newTransport(b, cfg)
	srv, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	cli, err = tr.Dialer("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close(); srv.Close() })
	return srv, cli
}

// oneSided benchmarks cli reading (or writing) size bytes of srv's memory
// against the same bytes over a plain socket.
func oneSided(b *testing.B, size int, write bool, cfg Config) {
	srv, cli := benchPair(b, cfg)
	mr, err := srv.RegisterMemory(make([]byte, size), fabric.AccessRemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	local := make([]byte, size)
	rb := mr.Remote(0, size)
	ctx := context.Background()
	op := func() {
		var err error
		if write {
			err = cli.Write(ctx, local, rb)
		} else {
			err = cli.Read(ctx, rb, local)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	var base func()
	if write {
		base = fabrictest.SocketExchange(b, size, 1)
	} else {
		base = fabrictest.SocketExchange(b, 8, size)
	}
	b.SetBytes(int64(size))
	b.ReportMetric(fabrictest.Versus(b, op, base), "x_socket")
}

// BenchmarkRead: RDMA-READ-style pulls of a peer's registered memory.
func BenchmarkRead(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("size="+s.name, func(b *testing.B) { oneSided(b, s.n, false, Config{}) })
	}
	b.Run("size=1MiB/crc=on", func(b *testing.B) { oneSided(b, 1<<20, false, Config{DataChecksum: true}) })
}

// BenchmarkWrite: RDMA-WRITE-style pushes into a peer's registered memory.
func BenchmarkWrite(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("size="+s.name, func(b *testing.B) { oneSided(b, s.n, true, Config{}) })
	}
	b.Run("size=1MiB/crc=on", func(b *testing.B) { oneSided(b, 1<<20, true, Config{DataChecksum: true}) })
}

// BenchmarkCall: a 64-byte request and response, against a raw socket
// ping-pong of 64 bytes each way.
func BenchmarkCall(b *testing.B) {
	srv, cli := benchPair(b, Config{})
	fabric.Handle(srv, "echo", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		return req, nil
	})
	req := wrapperspb.Bytes(make([]byte, 62)) // 64 bytes encoded
	var resp wrapperspb.BytesValue
	ctx := context.Background()
	op := func() {
		if err := cli.Call(ctx, srv.ID(), "echo", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(fabrictest.Versus(b, op, fabrictest.SocketExchange(b, 64, 64)), "x_pingpong")
}

// BenchmarkReadBatch: 64 ranges of 4 KiB in one round trip.
func BenchmarkReadBatch(b *testing.B) {
	srv, cli := benchPair(b, Config{})
	const n, size = 64, 4 << 10
	mr, err := srv.RegisterMemory(make([]byte, n*size*2), fabric.AccessRemoteRead)
	if err != nil {
		b.Fatal(err)
	}
	ops := make([]fabric.Op, n)
	for i := range ops {
		ops[i] = fabric.Op{Remote: mr.Remote(i*2*size, size), Local: make([]byte, size)}
	}
	ctx := context.Background()
	b.SetBytes(n * size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cli.ReadBatch(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "ranges/s")
}
