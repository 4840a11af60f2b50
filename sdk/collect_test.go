package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/server/cluster"
)

// metricSum adds up every series of the metric called name.
func metricSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestCollectorAfterLargestFile is issue 19's bug: a file truncated to the
// largest length and deleted must cost the collector nothing, so that a
// 20 MiB file deleted after it is gone from storage within the collection
// delay and a few seconds; past the largest length truncate is refused
// with EFBIG; and the idle cluster then does no collector work.
func TestCollectorAfterLargestFile(t *testing.T) {
	const delay = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startClusterWith(t, cluster.Config{Targets: 3, ChunkSize: 1 << 20,
		CollectDelay: delay, CollectInterval: 100 * time.Millisecond, ElectionWait: -1})
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	g := c.Metrics()

	if err := cl.WriteFile(ctx, "/huge", nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.Truncate(ctx, "/huge", fsmeta.MaxFileSize); err != nil {
		t.Fatalf("truncate to the largest length: %v", err)
	}
	if fi, err := cl.Stat(ctx, "/huge"); err != nil || fi.Size() != fsmeta.MaxFileSize {
		t.Fatalf("stat after truncating to %d: %v, %v", int64(fsmeta.MaxFileSize), fi, err)
	}
	err := cl.Truncate(ctx, "/huge", fsmeta.MaxFileSize+1)
	if !errors.Is(err, ErrTooLarge) || Errno(err) != syscall.EFBIG {
		t.Fatalf("truncate past the largest length: %v (errno %v), want EFBIG", err, Errno(err))
	}
	// Past the largest length the meta service refuses it too, for
	// clients that do not check.
	f, err := cl.OpenFile(ctx, "/huge", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), fsmeta.MaxFileSize); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a write past the largest length: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Remove(ctx, "/huge"); err != nil {
		t.Fatal(err)
	}

	data := fabrictest.RandBytes(19, 20<<20)
	if err := cl.WriteFile(ctx, "/data", data); err != nil {
		t.Fatal(err)
	}
	if n := metricSum(t, g, "sluice_storage_chunks"); n != 3*20 {
		t.Fatalf("%v chunks on storage after writing 20 chunks on chains of 3", n)
	}
	if err := cl.Remove(ctx, "/data"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for metricSum(t, g, "sluice_storage_chunks") != 0 {
		if time.Since(deleted) > delay+5*time.Second {
			t.Fatalf("%v chunks still on storage %v after the delete (collection delay %v)",
				metricSum(t, g, "sluice_storage_chunks"), time.Since(deleted), delay)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the 20 MiB file's chunks went %v after its delete (delay %v)", time.Since(deleted).Round(time.Millisecond), delay)
	// The huge file never stored a byte, so its unlink queued nothing: the
	// collector's one file is the 20 MiB one.
	for deadline := time.Now().Add(5 * time.Second); metricSum(t, g, "sluice_meta_collector_files_total") != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("collector files_total %v, want 1", metricSum(t, g, "sluice_meta_collector_files_total"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := metricSum(t, g, "sluice_meta_collector_chunks_removed_total"); n != 20 {
		t.Fatalf("the collector removed %v chunks, want the 20 written (none of the huge file's)", n)
	}

	// Idle: rounds go on, but no file is attempted and no chunk removed.
	idle := func() [5]float64 {
		var v [5]float64
		for i, name := range []string{"rounds_total", "attempts_total", "chunks_removed_total", "errors_total", "pending"} {
			v[i] = metricSum(t, g, "sluice_meta_collector_"+name)
		}
		return v
	}
	before := idle()
	time.Sleep(time.Second)
	after := idle()
	if after[0] <= before[0] {
		t.Fatalf("no collector round in a second (rounds %v then %v): the test proves nothing", before[0], after[0])
	}
	if after[1] != before[1] || after[2] != before[2] || after[3] != 0 || after[4] != 0 {
		t.Fatalf("idle collector worked: attempts %v -> %v, chunks %v -> %v, errors %v, pending %v",
			before[1], after[1], before[2], after[2], after[3], after[4])
	}
}

// TestDeadWriterEnded: a writer process holds a file open for writing,
// which another client unlinks; while the writer lives it renews, and the
// file keeps its chunks past the lease; once it is SIGKILLed it stops
// renewing, the leader ends its session after a lease, and every chunk it
// stored leaves storage, although it never closed or synced the file (its
// writes reserved their room in the written mark first).
func TestDeadWriterEnded(t *testing.T) {
	const lease, delay = time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startClusterWith(t, cluster.Config{Targets: 3, ChunkSize: 1 << 20, CollectDelay: delay,
		CollectInterval: 50 * time.Millisecond, ElectionWait: -1, ClientLease: lease})
	defer c.Close()
	g := c.Metrics()
	cl := connect(t, c)
	defer cl.Close()

	b, _ := json.Marshal(writerSpec{Cluster: c.Addr, Token: c.Token, Path: "/held", Bytes: 3 << 20, Renew: lease / 5})
	p := testproc.Start(t, testproc.Command("writer", string(b)))
	p.Expect(t, "written", 30*time.Second)
	if err := cl.Remove(ctx, "/held"); err != nil {
		t.Fatal(err)
	}
	const chunks = 3 * 3        // 3 MiB on chains of 3
	time.Sleep(2*lease + delay) // the writer lives: its unlinked file stays
	if n := metricSum(t, g, "sluice_storage_chunks"); n != chunks {
		t.Fatalf("%v chunks on storage while the writer holds its unlinked file, want %d", n, chunks)
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for metricSum(t, g, "sluice_storage_chunks") != 0 {
		if time.Since(killed) > lease+delay+10*time.Second {
			t.Fatalf("%v chunks on storage %v after the writer was killed (lease %v, delay %v)",
				metricSum(t, g, "sluice_storage_chunks"), time.Since(killed), lease, delay)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the killed writer's file left storage %v after the kill", time.Since(killed).Round(time.Millisecond))
	if n := metricSum(t, g, "sluice_meta_collector_dead_writers_total"); n != 1 {
		t.Fatalf("dead_writers_total %v, want 1", n)
	}
}

// writerSpec is the "writer" child: it creates Path, writes Bytes (1 MiB
// at a time, never synced), says "written", and holds the file open
// (renewing every Renew) until it is killed.
type writerSpec struct {
	Cluster, Token, Path string
	Bytes                int
	Renew                time.Duration
}

func runWriter(s writerSpec) error {
	leaseRenewal = s.Renew
	ctx := context.Background()
	cl, err := Connect(ctx, Config{Cluster: s.Cluster, Token: s.Token})
	if err != nil {
		return err
	}
	f, err := cl.Create(ctx, s.Path)
	if err != nil {
		return err
	}
	// Never synced nor closed: what the collector may remove is bounded by
	// the reservations the writes made (File.reserve).
	for off := 0; off < s.Bytes; off += 1 << 20 {
		if _, err := f.WriteAt(fabrictest.RandBytes(uint64(off), min(1<<20, s.Bytes-off)), int64(off)); err != nil {
			return err
		}
	}
	fmt.Println("written")
	select {}
}

// TestWritesReserveTheirRoom: a file written from start to end raises its
// written mark ahead of its writes, doubling: a handful of reservations
// for 10 chunks, none within the first chunk, and a mark at least the
// written end and at most twice it, in the cluster before any close.
func TestWritesReserveTheirRoom(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	f, err := cl.Create(ctx, "/reserved")
	if err != nil {
		t.Fatal(err)
	}
	mark := func() uint64 {
		fi, err := cl.Stat(ctx, "/reserved")
		if err != nil {
			t.Fatal(err)
		}
		return fi.written
	}
	cs := uint64(f.in.GetLayout().GetChunkSize())
	var marks []uint64
	for off := uint64(0); off < 10*cs; off += cs / 2 {
		if _, err := f.WriteAt(fabrictest.RandBytes(off, int(cs/2)), int64(off)); err != nil {
			t.Fatal(err)
		}
		if m := mark(); len(marks) == 0 || m != marks[len(marks)-1] {
			marks = append(marks, m)
		}
		if m := mark(); m < off+cs/2 && off+cs/2 > cs {
			t.Fatalf("mark %d below the written end %d", m, off+cs/2)
		}
	}
	// 0 (the first chunk needs none), then 2, 4, 8 and 16 chunks.
	want := []uint64{0, 2 * cs, 4 * cs, 8 * cs, 16 * cs}
	if !slices.Equal(marks, want) {
		t.Fatalf("marks %v as the file grew, want %v", marks, want)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if m := mark(); m != 16*cs {
		t.Fatalf("mark %d after close, want the reservation %d kept (never lowered)", m, 16*cs)
	}
}
