package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/sluicefs/sluice/sdk"
	"golang.org/x/sys/unix"
)

// indices drains one epoch of a loader, checking each batch's contents,
// and returns the sample indices in delivery order and the batch count.
func indices(t *testing.T, l *Loader, maxBatches int) (out []int64, batches int) {
	t.Helper()
	ctx := context.Background()
	for batches < maxBatches {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		idx := b.Column(int(b.NumCols()) - 1).(*array.Int64).Int64Values()
		checkRows(t, b.RecordBatch, idx, 600)
		out = append(out, idx...)
		b.Release()
		batches++
	}
	return out, batches
}

// eachBatch hands f each batch of the loader's current epoch, in order.
func eachBatch(t *testing.T, l *Loader, f func(*Batch)) {
	t.Helper()
	for {
		b, err := l.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(b)
	}
}

func newLoader(t *testing.T, d *Dataset, cfg LoaderConfig) *Loader {
	t.Helper()
	cfg.IndexColumn = "idx"
	l, err := d.Loader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLoaderDeliversEverySampleOncePerEpoch(t *testing.T) {
	d := makeDataset(t, "once", 1000, 600, 256<<10)
	for _, shuffle := range []bool{true, false} {
		var epochs [2][]int64
		for epoch := range 2 {
			seen := map[int64]int{}
			var steps []int
			for rank := range 3 {
				stepsOfRank := 0
				for worker := range 2 {
					l := newLoader(t, d, LoaderConfig{BatchSize: 16, Shuffle: shuffle, Seed: 5, Epoch: int64(epoch),
						Rank: rank, WorldSize: 3, Worker: worker, Workers: 2, Readers: 3})
					got, n := indices(t, l, 1<<30)
					stepsOfRank += n
					for _, i := range got {
						seen[i]++
					}
					if rank == 0 && worker == 0 {
						epochs[epoch] = got
					}
				}
				steps = append(steps, stepsOfRank)
			}
			if len(seen) != 1000 {
				t.Fatalf("shuffle=%v epoch %d: %d distinct samples delivered", shuffle, epoch, len(seen))
			}
			for i, k := range seen {
				if k != 1 {
					t.Fatalf("shuffle=%v epoch %d: sample %d delivered %d times", shuffle, epoch, i, k)
				}
			}
			if steps[0] != steps[1] || steps[1] != steps[2] {
				t.Fatalf("steps per rank differ: %v", steps)
			}
		}
		differ := !slices.Equal(epochs[0], epochs[1])
		if differ != shuffle {
			t.Fatalf("shuffle=%v: epochs differ = %v", shuffle, differ)
		}
		if !shuffle && !slices.IsSorted(epochs[0]) {
			t.Fatal("unshuffled order is not the natural order")
		}
	}
}

func TestLoaderDropLast(t *testing.T) {
	d := makeDataset(t, "droplast", 100, 50, 0)
	for _, dropLast := range []bool{false, true} {
		l := newLoader(t, d, LoaderConfig{BatchSize: 8, Shuffle: true, WorldSize: 3, Rank: 2, DropLast: dropLast})
		var partial int
		eachBatch(t, l, func(b *Batch) {
			if b.Partial {
				partial++
				if b.NumRows() >= 8 {
					t.Fatalf("partial batch has %d rows", b.NumRows())
				}
			} else if b.NumRows() != 8 {
				t.Fatalf("full batch has %d rows", b.NumRows())
			}
			b.Release()
		})
		// 100 = 4 steps of 3x8 + 4 left: one partial step unless dropped.
		if want := map[bool]int{false: 1, true: 0}[dropLast]; partial != want || l.Steps() != int64(4+want) {
			t.Fatalf("dropLast=%v: %d partial batches, %d steps", dropLast, partial, l.Steps())
		}
	}
}

// TestLoaderResumeIsExact stops at a random step, saves the state (through
// JSON, as a checkpoint would) and resumes in a new loader: the
// concatenation equals the uninterrupted run, across an epoch boundary.
func TestLoaderResumeIsExact(t *testing.T) {
	d := makeDataset(t, "resume", 777, 600, 256<<10)
	cfg := LoaderConfig{BatchSize: 10, Shuffle: true, Seed: 9}
	full := newLoader(t, d, cfg)
	want, _ := indices(t, full, 1<<30)
	full.SetEpoch(1)
	next, _ := indices(t, full, 1<<30)
	want = append(want, next...)

	rng := rand.New(rand.NewPCG(3, 3))
	for trial := 0; trial < 3; trial++ {
		k := rng.IntN(78)
		a := newLoader(t, d, cfg)
		got, _ := indices(t, a, k)
		js, err := json.Marshal(a.State())
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		var s State
		if err := json.Unmarshal(js, &s); err != nil {
			t.Fatal(err)
		}
		b := newLoader(t, d, LoaderConfig{BatchSize: 10, Seed: 12345}) // seed and shuffle come from the state
		if err := b.Resume(s); err != nil {
			t.Fatal(err)
		}
		rest, _ := indices(t, b, 1<<30)
		got = append(got, rest...)
		b.SetEpoch(s.Epoch + 1)
		rest, _ = indices(t, b, 1<<30)
		got = append(got, rest...)
		if !slices.Equal(got, want) {
			t.Fatalf("stop after %d batches: resumed run differs from the uninterrupted one", k)
		}
	}
}

// TestLoaderResumeWithFewerRanks runs 4 ranks for some steps, then resumes
// the epoch on 3 ranks: the remaining samples come exactly once.
func TestLoaderResumeWithFewerRanks(t *testing.T) {
	d := makeDataset(t, "elastic", 1001, 600, 0)
	seen := map[int64]int{}
	var state State
	for rank := range 4 {
		l := newLoader(t, d, LoaderConfig{BatchSize: 7, Shuffle: true, Seed: 1, Rank: rank, WorldSize: 4})
		got, _ := indices(t, l, 13)
		for _, i := range got {
			seen[i]++
		}
		if rank > 0 && l.State() != state {
			t.Fatalf("ranks disagree on the state: %+v vs %+v", l.State(), state)
		}
		state = l.State()
	}
	for rank := range 3 {
		l := newLoader(t, d, LoaderConfig{BatchSize: 7, Rank: rank, WorldSize: 3})
		if err := l.Resume(state); err != nil {
			t.Fatal(err)
		}
		got, _ := indices(t, l, 1<<30)
		for _, i := range got {
			seen[i]++
		}
	}
	if len(seen) != 1001 {
		t.Fatalf("%d of 1001 samples covered", len(seen))
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("sample %d delivered %d times", i, k)
		}
	}
}

func TestLoaderRejectsBadInput(t *testing.T) {
	d := makeDataset(t, "badloader", 10, 10, 0)
	other := makeDataset(t, "otherloader", 11, 10, 0)
	for _, cfg := range []LoaderConfig{{BatchSize: 0}, {BatchSize: 1, Rank: 1, WorldSize: 1}, {BatchSize: 1, Worker: 2, Workers: 2},
		{BatchSize: 1, Columns: []string{"nope"}}, {BatchSize: 1, IndexColumn: "label"}} {
		if _, err := d.Loader(cfg); err == nil {
			t.Errorf("Loader(%+v) accepted", cfg)
		}
	}
	l := newLoader(t, d, LoaderConfig{BatchSize: 2})
	o := newLoader(t, other, LoaderConfig{BatchSize: 2})
	if err := l.Resume(o.State()); err == nil {
		t.Fatal("resumed from another dataset's state")
	}
	s := l.State()
	s.Consumed = 11
	if err := l.Resume(s); err == nil {
		t.Fatal("resumed past the end")
	}
	if err := d.Close(); err == nil {
		t.Fatal("closed a dataset under an open loader")
	}
	l.Close()
	if err := d.Close(); err != nil {
		t.Fatalf("close after its loader: %v", err)
	}
	if _, err := d.Loader(LoaderConfig{BatchSize: 1}); err == nil {
		t.Fatal("a loader on a closed dataset")
	}
}

// TestBatchMemoryIsNotReusedWhileHeld keeps some batches while the loader
// runs on under a small budget (room for about 25 batches, 10 held),
// releasing the others from another goroutine:
// held batches keep their contents (the race detector watches the memory).
func TestBatchMemoryIsNotReusedWhileHeld(t *testing.T) {
	d := makeDataset(t, "held", 2000, 600, 256<<10)
	l := newLoader(t, d, LoaderConfig{BatchSize: 8, Shuffle: true, Prefetch: 200 << 10, Readers: 4})
	release := make(chan *Batch, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := range release {
			b.Release()
		}
	}()
	var held []*Batch
	eachBatch(t, l, func(b *Batch) {
		if b.Step%25 == 0 {
			held = append(held, b)
		} else {
			release <- b
		}
	})
	close(release)
	wg.Wait()
	for _, b := range held {
		idx := b.Column(int(b.NumCols()) - 1).(*array.Int64).Int64Values()
		checkRows(t, b.RecordBatch, idx, 600)
		b.Release()
	}
	l.Close()
	if n := len(l.a.used); n != 0 {
		t.Fatalf("%d arena pieces still out after every batch was released", n)
	}
}

// TestLoaderSaysWhenBatchesAreHeld keeps every batch it gets. The
// read-ahead waits when the budget is full (counted as memory wait); once
// the caller itself waits on memory only its own batches hold, the loader
// grows past the budget with one warning, and at its hard limit (twice the
// budget) fails with an error that says what to do, instead of hanging.
// Releasing the batches lets the epoch finish from where it stopped.
func TestLoaderSaysWhenBatchesAreHeld(t *testing.T) {
	d := makeDataset(t, "hoard", 400, 600, 0)
	l := newLoader(t, d, LoaderConfig{BatchSize: 8, Prefetch: 1, Readers: 1})
	m := d.c.Metrics()
	before, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	var mu sync.Mutex
	l.a.log = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	ctx := context.Background()
	var held []*Batch
	for {
		b, err := l.Next(ctx)
		if err != nil {
			if !strings.Contains(err.Error(), "release batches") || !strings.Contains(err.Error(), "hard limit") {
				t.Fatalf("after %d batches kept: %v", len(held), err)
			}
			break
		}
		held = append(held, b)
		if len(held) == 1 {
			time.Sleep(100 * time.Millisecond) // the read-ahead fills the budget and waits
		}
		if len(held) == 50 {
			t.Fatal("the epoch ended with every batch kept: the memory bounds nothing")
		}
	}
	kept := len(held)
	// The budget holds three of the largest batches and the hard limit
	// twice that: batches are often smaller than the largest.
	if kept < 3 || kept > 30 {
		t.Fatalf("%d batches kept before the hard limit", kept)
	}
	mu.Lock()
	warnings := strings.Count(logged.String(), "growing past it")
	mu.Unlock()
	if warnings != 1 {
		t.Fatalf("%d warnings about growing past the budget, want 1:\n%s", warnings, logged.String())
	}
	for _, b := range held {
		b.Release()
	}
	n := kept
	eachBatch(t, l, func(b *Batch) {
		n++
		b.Release()
	})
	if n != 50 {
		t.Fatalf("%d batches in the epoch, want 50", n)
	}
	after, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	delta := func(name string) float64 { return after[name] - before[name] }
	if d := delta("sluice_loader_batches_total"); d != 50 {
		t.Errorf("loader batches moved by %v, want 50", d)
	}
	if d := delta("sluice_loader_samples_total"); d != 400 {
		t.Errorf("loader samples moved by %v, want 400", d)
	}
	if d := delta("sluice_loader_memory_wait_seconds_total"); d <= 0 {
		t.Errorf("read-ahead memory wait moved by %vs, though the budget was full for 100 ms", d)
	}
	if d := delta("sluice_loader_read_ahead_batches"); d != 0 {
		t.Errorf("read-ahead depth moved by %v over a whole epoch, want back where it was", d)
	}
	if d := delta("sluice_loader_stall_seconds_total"); d <= 0 {
		t.Errorf("stall moved by %vs, though Next waited for reads", d)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSharedMemoryLoaderIsMappableElsewhere maps a shared loader's memfd a
// second time, as another process would through /proc/PID/fd, and finds
// every buffer of every batch there, byte for byte.
func TestSharedMemoryLoaderIsMappableElsewhere(t *testing.T) {
	d := makeDataset(t, "shared", 300, 600, 256<<10)
	if fd, _, _ := newLoader(t, d, LoaderConfig{BatchSize: 8}).SharedMemory(); fd != -1 {
		t.Fatalf("a loader without SharedMemory has memfd %d", fd)
	}
	l := newLoader(t, d, LoaderConfig{BatchSize: 16, Shuffle: true, SharedMemory: true})
	fd, base, size := l.SharedMemory()
	if fd < 0 || size <= 0 {
		t.Fatalf("shared loader: memfd %d, %d bytes", fd, size)
	}
	f, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	var seen int
	eachBatch(t, l, func(b *Batch) {
		for _, col := range b.Columns() {
			for _, buf := range col.Data().Buffers() {
				if buf == nil || buf.Len() == 0 {
					continue
				}
				off := int(uintptr(unsafe.Pointer(&buf.Bytes()[0])) - base)
				if off < 0 || off+buf.Len() > size {
					t.Fatalf("a batch buffer at offset %d (%d bytes) is outside the %d-byte memfd", off, buf.Len(), size)
				}
				if !bytes.Equal(other[off:off+buf.Len()], buf.Bytes()) {
					t.Fatalf("the second mapping differs at offset %d", off)
				}
			}
		}
		seen += int(b.NumRows())
		b.Release()
	})
	if seen != 300 {
		t.Fatalf("%d samples, want 300", seen)
	}
}

// TestLoaderThroughLocalAgent reads epochs through a local agent's rings:
// the same batches, byte for byte, as the direct path, in memory another
// process can map.
func TestLoaderThroughLocalAgent(t *testing.T) {
	d := makeDataset(t, "agent", 700, 600, 64<<10)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	a, err := sdk.NewAgent(client(t), sdk.AgentConfig{Path: sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx) }()
	defer func() {
		stop()
		a.Close()
		<-served
	}()
	cfg := LoaderConfig{BatchSize: 32, Shuffle: true, Seed: 11, Readers: 4}
	direct := newLoader(t, d, cfg)
	cfg.Agent = sock
	viaAgent := newLoader(t, d, cfg)
	if fd, _, _ := viaAgent.SharedMemory(); fd < 0 {
		t.Fatal("the agent's Iov has no memfd")
	}
	for epoch := range 2 {
		direct.SetEpoch(int64(epoch))
		viaAgent.SetEpoch(int64(epoch))
		want, _ := indices(t, direct, 1<<30) // indices checks every row's bytes
		got, _ := indices(t, viaAgent, 1<<30)
		if !slices.Equal(got, want) {
			t.Fatalf("epoch %d: the agent path delivered another order", epoch)
		}
		if len(got) != 700 {
			t.Fatalf("epoch %d: %d samples", epoch, len(got))
		}
	}
	viaAgent.Close()
	if n := a.Clients(); n != 0 {
		// the session ends with the loader (reclaimed asynchronously)
		deadline := time.Now().Add(5 * time.Second)
		for a.Clients() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n = a.Clients(); n != 0 {
			t.Fatalf("%d agent sessions left after the loader closed", n)
		}
	}
	cfg.Agent = filepath.Join(t.TempDir(), "none.sock")
	if _, err := d.Loader(cfg); err == nil || !strings.Contains(err.Error(), "local agent") {
		t.Fatalf("a loader with no agent at its socket: %v", err)
	}
}

// Wait takes nothing: whatever it returns, Next then delivers the same
// batches, in the same order, as a loader that only calls Next, and the
// state stays that after the last batch delivered; nor does a Next cut
// short by its context. A batch Wait saw and nobody took goes back to the
// loader's memory when the epoch changes.
func TestLoaderWaitTakesNothing(t *testing.T) {
	d := makeDataset(t, "wait", 100, 600, 64<<10)
	cfg := LoaderConfig{BatchSize: 16, Shuffle: true, Seed: 3, Readers: 2}
	want, _ := indices(t, newLoader(t, d, cfg), 1<<30)
	l := newLoader(t, d, cfg)
	ctx := context.Background()
	var got []int64
	for step := 0; ; step++ {
		before := l.State()
		if step%3 == 0 {
			l.Wait(0) // may or may not see the batch yet
		}
		var b *Batch
		if step%4 == 1 {
			// Done before it starts: Next may still deliver a batch that
			// is ready; if it does not, it must have taken nothing.
			cut, cancel := context.WithCancel(ctx)
			cancel()
			var err error
			b, err = l.Next(cut)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("step %d: Next with its context done: %v", step, err)
			}
		}
		if !l.Wait(10*time.Second) || !l.Wait(0) {
			t.Fatalf("step %d: not ready after 10 s", step)
		}
		if b == nil {
			if s := l.State(); s != before {
				t.Fatalf("step %d: Wait or a cut Next moved the state from %+v to %+v", step, before, s)
			}
			var err error
			b, err = l.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, b.Column(int(b.NumCols())-1).(*array.Int64).Int64Values()...)
		b.Release()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("with Wait: %v\nwithout: %v", got, want)
	}
	if _, err := l.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the epoch: %v, want io.EOF", err)
	}
	// A batch seen by Wait and then left: changing the epoch drops it.
	l.SetEpoch(1)
	if !l.Wait(10 * time.Second) {
		t.Fatal("epoch 1 not ready after 10 s")
	}
	l.SetEpoch(2)
	if n, _ := indices(t, l, 1<<30); len(n) != 100 {
		t.Fatalf("epoch 2: %d samples", len(n))
	}
	l.a.mu.Lock()
	held := len(l.a.used)
	l.a.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d pieces of the loader's memory still held after the epoch", held)
	}
}
