package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/server/cluster"
)

func startCluster(t *testing.T, dir string) *cluster.Cluster {
	t.Helper()
	return startClusterWith(t, cluster.Config{Dir: dir, Targets: 3, ChunkSize: 64 << 10})
}

// startClusterWith starts an embedded cluster with cfg (its Dir a
// temporary one if unset); the caller closes it.
func startClusterWith(t *testing.T, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func connect(t *testing.T, c *cluster.Cluster) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Connect(ctx, Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestFileAPI(t *testing.T) {
	dir := t.TempDir()
	c := startCluster(t, dir)
	cl := connect(t, c)
	ctx := context.Background()
	if err := cl.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cl.Mkdir(ctx, "/d", 0o755); !errors.Is(err, ErrExist) {
		t.Fatalf("mkdir twice: %v", err)
	}
	f, err := cl.Create(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	data := fabrictest.RandBytes(1, 300<<10) // five 64 KiB chunks, striped
	if n, err := f.WriteAt(data, 0); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	patch := fabrictest.RandBytes(2, 1000)
	if _, err := f.WriteAt(patch, 65000); err != nil { // across a chunk boundary
		t.Fatal(err)
	}
	copy(data[65000:], patch)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if in, err := cl.Stat(ctx, "/d/f"); err != nil || in.Size() != int64(len(data)) {
		t.Fatalf("size after close: %v %v", in, err)
	}
	r, err := cl.Open(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+10)
	n, err := r.ReadAt(got, 0)
	if n != len(data) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], data) {
		t.Fatalf("read back %d bytes (%v), equal=%v", n, err, bytes.Equal(got[:n], data))
	}
	if _, err := r.ReadAt(got[:10], int64(len(data))); !errors.Is(err, io.EOF) {
		t.Fatalf("read at the end: %v", err)
	}
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("wrote through a read-only handle")
	}
	// Concurrent readers through one client.
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 10000)
			off := int64(g * 70000)
			if n, err := r.ReadAt(b, off); err != nil || !bytes.Equal(b[:n], data[off:off+int64(n)]) {
				t.Errorf("concurrent read at %d: %v", off, err)
			}
		}()
	}
	wg.Wait()
	r.Close()
	ents, err := cl.ReadDir(ctx, "/d")
	if err != nil || len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	if err := cl.Rename(ctx, "/d/f", "/d/g"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Stat(ctx, "/d/f"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("old name after rename: %v", err)
	}
	cl.Close()
	c.Close()

	// Restart on the same directory: same token, same data.
	c = startCluster(t, dir)
	defer c.Close()
	cl = connect(t, c)
	defer cl.Close()
	r, err = cl.Open(ctx, "/d/g")
	if err != nil {
		t.Fatal(err)
	}
	n, _ = r.ReadAt(got, 0)
	if n != len(data) || !bytes.Equal(got[:n], data) {
		t.Fatal("data changed across a restart")
	}
	if err := cl.Remove(ctx, "/d/g"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Remove(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(ctx, Config{Cluster: c.Addr, Token: "wrong"}); err == nil {
		t.Fatal("connected with a wrong token")
	}
}

func TestReadBatch(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	ctx := context.Background()
	data := fabrictest.RandBytes(5, 500<<10)
	f, err := cl.Create(ctx, "/batch.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, _ := cl.Open(ctx, "/batch.bin")
	buf, err := cl.NewBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	var ops []ReadOp
	for i := 0; i < 100; i++ {
		off := int64(i*5003) % int64(len(data))
		ops = append(ops, ReadOp{File: r, Off: off, N: 4096, Buf: buf, BufOff: i * 4096})
	}
	ops = append(ops, ReadOp{File: r, Off: int64(len(data)) - 100, N: 4096, Buf: buf, BufOff: 100 * 4096}) // past the end
	for i := range buf.B {
		buf.B[i] = 0xee
	}
	if err := cl.ReadBatch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops[:100] {
		end := min(op.Off+4096, int64(len(data)))
		want := data[op.Off:end]
		if !bytes.Equal(buf.B[op.BufOff:op.BufOff+len(want)], want) {
			t.Fatalf("op %d: bytes differ", i)
		}
	}
	last := ops[100]
	if !bytes.Equal(buf.B[last.BufOff:last.BufOff+100], data[len(data)-100:]) {
		t.Fatal("the range at the end reads wrong")
	}
	if err := cl.ReadBatch(ctx, []ReadOp{{File: r, N: 10, Buf: buf, BufOff: len(buf.B) - 5}}); err == nil {
		t.Fatal("a range outside its buffer was accepted")
	}
}

// TestLargeChunks: chunks larger than the SDK's staging buffers travel in
// several pieces.
func TestLargeChunks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 1, ChunkSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	data := fabrictest.RandBytes(8, 9<<20)
	f, err := cl.Create(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, _ := cl.Open(ctx, "/big")
	got := make([]byte, len(data))
	if n, err := r.ReadAt(got, 0); n != len(data) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(got, data) {
		t.Fatalf("read %d: %v", n, err)
	}
}

// TestInProcessFabric: a client made on the embedded cluster's own network
// moves data by memory copy (its endpoint is not a TCP one), and what it
// writes a TCP client reads, and the other way round, whole and batched.
func TestInProcessFabric(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	near, err := Connect(ctx, Config{Cluster: c.Addr, Token: c.Token, Fabric: c.Fabric()})
	if err != nil {
		t.Fatal(err)
	}
	defer near.Close()
	far := connect(t, c)
	defer far.Close()
	if !strings.HasPrefix(string(near.ep.ID()), "local-") || strings.HasPrefix(string(far.ep.ID()), "local-") {
		t.Fatalf("endpoints: in-process %s, TCP %s", near.ep.ID(), far.ep.ID())
	}
	for i, pair := range [][2]*Client{{near, far}, {far, near}} {
		w, r := pair[0], pair[1]
		name := fmt.Sprintf("/f%d", i)
		data := fabrictest.RandBytes(uint64(10+i), 700<<10) // 11 chunks over 3 chains
		if err := w.WriteFile(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		rf, err := r.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := rf.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back: %v, equal=%v", name, err, bytes.Equal(got, data))
		}
		buf, err := r.NewBuffer(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		var ops []ReadOp
		for k := 0; k < 16; k++ {
			ops = append(ops, ReadOp{File: rf, Off: int64(k * 40001), N: 4096, Buf: buf, BufOff: k * 4096})
		}
		if err := r.ReadBatch(ctx, ops); err != nil {
			t.Fatal(err)
		}
		for k, op := range ops {
			if !bytes.Equal(buf.B[op.BufOff:op.BufOff+4096], data[op.Off:op.Off+4096]) {
				t.Fatalf("%s: batched op %d differs", name, k)
			}
		}
		buf.Release()
		rf.Close()
	}
}

// TestUnlinkedWhileOpen: a file unlinked while a client has it open for
// reading keeps its chunks until it is closed, as on a local disk; once it
// is closed and its read lease has run out, the collector takes them.
func TestUnlinkedWhileOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3, ChunkSize: 64 << 10, CollectDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reader, other := connect(t, c), connect(t, c)
	defer reader.Close()
	defer other.Close()
	data := fabrictest.RandBytes(21, 200<<10)
	if err := other.WriteFile(ctx, "/f", data); err != nil {
		t.Fatal(err)
	}
	f, err := reader.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Remove(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	collect := func(now time.Time) int {
		for {
			n, err := c.Collect(ctx, now)
			if err == nil {
				return n
			}
			if ctx.Err() != nil {
				t.Fatalf("collect: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // its storage client is still starting
		}
	}
	time.Sleep(10 * time.Millisecond) // past the collect delay
	if n := collect(time.Now()); n != 0 {
		t.Fatalf("the collector took %d files, one of them open", n)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the unlinked open file: %v, equal=%v", err, bytes.Equal(got, data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := collect(time.Now().Add(fsmeta.ReadLease + time.Second)); n != 1 {
		t.Fatalf("after the close and its lease the collector took %d files, want 1", n)
	}
}
