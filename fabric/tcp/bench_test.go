package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The benchmarks report their throughput as a ratio to the same bytes moved
// over a plain loopback TCP socket in the same process and run, so a shared,
// noisy machine does not skew the figure.

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// rawPair returns the two ends of a loopback TCP connection.
func rawPair(b *testing.B) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server = <-acc
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// rawRate measures bytes/s of n request-response exchanges over a plain
// socket: the client sends reqSize bytes, the server answers respSize bytes.
// Each side reads the other's bytes into a buffer of its own, as the fabric
// does into registered memory.
func rawRate(b *testing.B, n, reqSize, respSize int) float64 {
	c, s := rawPair(b)
	go func() {
		req, resp := make([]byte, reqSize), make([]byte, respSize)
		for {
			if _, err := io.ReadFull(s, req); err != nil {
				return
			}
			if _, err := s.Write(resp); err != nil {
				return
			}
		}
	}()
	req, resp := make([]byte, reqSize), make([]byte, respSize)
	binary.LittleEndian.PutUint64(req, 1)
	run := func(k int) {
		for i := 0; i < k; i++ {
			if _, err := c.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, resp); err != nil {
				b.Fatal(err)
			}
		}
	}
	run(min(n, 100))
	t0 := time.Now()
	run(n)
	return float64(n*max(reqSize, respSize)) / time.Since(t0).Seconds()
}

func benchPair(b *testing.B) (srv, cli fabric.Endpoint) {
	tr := newTransport(b, Config{})
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

// oneSided benchmarks cli reading (or writing) size bytes of srv's memory.
func oneSided(b *testing.B, size int, write bool) {
	srv, cli := benchPair(b)
	mr, err := srv.RegisterMemory(make([]byte, size), fabric.AccessRemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	local := make([]byte, size)
	rb := mr.Remote(0, size)
	ctx := context.Background()
	op := func() error {
		if write {
			return cli.Write(ctx, local, rb)
		}
		return cli.Read(ctx, rb, local)
	}
	for i := 0; i < 100; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(t0)
	b.StopTimer()
	rate := float64(size) * float64(b.N) / el.Seconds()
	var raw float64
	if write {
		raw = rawRate(b, b.N, size, 1)
	} else {
		raw = rawRate(b, b.N, 8, size)
	}
	b.ReportMetric(rate/raw, "x_socket")
	b.ReportMetric(raw/1e6, "socket_MB/s")
}

// BenchmarkRead: RDMA-READ-style pulls of a peer's registered memory.
func BenchmarkRead(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("size="+s.name, func(b *testing.B) { oneSided(b, s.n, false) })
	}
}

// BenchmarkWrite: RDMA-WRITE-style pushes into a peer's registered memory.
func BenchmarkWrite(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("size="+s.name, func(b *testing.B) { oneSided(b, s.n, true) })
	}
}

// BenchmarkCall: a 64-byte request and response, against a raw socket
// ping-pong of 64 bytes each way.
func BenchmarkCall(b *testing.B) {
	srv, cli := benchPair(b)
	fabric.Handle(srv, "echo", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		return req, nil
	})
	req := wrapperspb.Bytes(make([]byte, 62)) // 64 bytes encoded
	var resp wrapperspb.BytesValue
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if err := cli.Call(ctx, srv.ID(), "echo", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if err := cli.Call(ctx, srv.ID(), "echo", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(t0)
	b.StopTimer()
	rate := float64(b.N) / el.Seconds()
	raw := rawRate(b, b.N, 64, 64) / 64
	b.ReportMetric(rate/raw, "x_pingpong")
	b.ReportMetric(rate, "calls/s")
}

// BenchmarkReadBatch: 64 ranges of 4 KiB in one round trip.
func BenchmarkReadBatch(b *testing.B) {
	srv, cli := benchPair(b)
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

var _ = fmt.Sprint
