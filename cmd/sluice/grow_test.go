package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
)

// files is what a test wrote, by name, for reading back.
type files struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (f *files) put(name string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data[name] = b
}

func (f *files) snapshot() map[string][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]byte, len(f.data))
	for k, v := range f.data {
		out[k] = v
	}
	return out
}

// readBack reads name whole and compares it with want.
func readBack(ctx context.Context, cl *sdk.Client, name string, want []byte) error {
	f, err := cl.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	got := make([]byte, len(want))
	n, err := f.ReadAt(got, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if n != len(want) || !bytes.Equal(got, want) {
		return fmt.Errorf("read %s: %d bytes of %d, equal=%v", name, n, len(want), bytes.Equal(got[:n], want[:n]))
	}
	return nil
}

// clientLoad writes new files (PREFIX0, PREFIX1, ...) and reads the written ones back, over and
// over, until stopped, keeping every error a client saw.
type clientLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	ops  int
}

func startLoad(ctx context.Context, cl *sdk.Client, fs *files, prefix string) *clientLoad {
	l := &clientLoad{stop: make(chan struct{})}
	fail := func(err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.errs = append(l.errs, err)
		}
		l.ops++
	}
	pause := func() bool {
		select {
		case <-l.stop:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}
	l.wg.Add(2)
	go func() { // the writer
		defer l.wg.Done()
		for i := 0; pause(); i++ {
			name, b := fmt.Sprintf("%s%d", prefix, i), fabrictest.RandBytes(uint64(1000+i), 200<<10+i)
			err := cl.WriteFile(ctx, name, b)
			if err == nil {
				fs.put(name, b)
			}
			fail(err)
		}
	}()
	go func() { // the reader
		defer l.wg.Done()
		for pause() {
			for name, b := range fs.snapshot() {
				fail(readBack(ctx, cl, name, b))
				if !pause() {
					return
				}
			}
		}
	}()
	return l
}

// end stops the load and returns the errors clients saw, and how many
// operations ran.
func (l *clientLoad) end() ([]error, int) {
	close(l.stop)
	l.wg.Wait()
	return l.errs, l.ops
}

// replicated waits until the targets (by their storage nodes' /metrics)
// hold 3 replicas of every 64 KiB chunk of the files written, no more:
// targets moved out of chains drop their chunks there (drop_left).
func replicated(t *testing.T, fs *files, metrics map[int]string, targets ...int) {
	t.Helper()
	want := 0
	for _, b := range fs.snapshot() {
		want += 3 * ((len(b) + 64<<10 - 1) / (64 << 10))
	}
	re := regexp.MustCompile(`(?m)^sluice_storage_chunks\{[^}]*\} (\d+)$`)
	held := func() (n int) {
		for _, i := range targets {
			resp, err := http.Get(metrics[i])
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := re.FindSubmatch(body)
			if m == nil {
				t.Fatalf("no sluice_storage_chunks at %s", metrics[i])
			}
			k, _ := strconv.Atoi(string(m[1]))
			n += k
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for n := held(); n != want; n = held() {
		if time.Now().After(deadline) || n < want {
			t.Fatalf("targets %v hold %d chunks, want %d (3 replicas of each)", targets, n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestGrowRebalanceDrain: four `sluice server` storage processes and one
// meta; data written once; a fifth node added and `sluice admin
// rebalance --wait` run while a writer and a reader go on with no error;
// then a node drained and SIGKILLed midway: the drain completes from the
// survivors, every byte written reads back, and once the dead node is
// retired status shows nothing draining or moving.
func TestGrowRebalanceDrain(t *testing.T) {
	c := startMetaProc(t, map[string]any{"expect_targets": 4, "replicas": 3, "stripe": 4, "chunk_size": 64 << 10, "max_moves": 2})
	metrics := map[int]string{} // storage node -> its /metrics
	storage := func(i int) []string {
		httpAddr := testproc.FreeAddr(t)
		metrics[i] = "http://" + httpAddr + "/metrics"
		return c.storageArgs(i, httpAddr, map[string]any{"chunk_size": 64 << 10, "drop_left": "1s"})
	}
	s2 := startProc(t, "storage node", storage(2)...)
	for _, i := range []int{1, 3, 4} {
		startProc(t, "storage node", storage(i)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cl, status, waitFor := watchCluster(ctx, t, c.addr, c.tokenFile)
	waitFor("chain table", "chain 4 ")
	// Bad input gets one line saying what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "drain", "--node", "nope"}, `drain: no storage node "nope" with targets`},
		{[]string{"admin", "drain", "--node", "s1,s2"}, "2 draining replica(s) to replace"},
		{[]string{"admin", "drain"}, "name a storage node (--node) or a target (--target)"},
	} {
		if _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("sluice %v: %v, want one line with %q", tc.args, err, tc.want)
		}
	}
	fs := &files{data: map[string][]byte{}}
	for i := range 16 {
		b := fabrictest.RandBytes(uint64(i), 1<<20+i)
		if err := cl.WriteFile(ctx, fmt.Sprint("/f", i), b); err != nil {
			t.Fatal(err)
		}
		fs.put(fmt.Sprint("/f", i), b)
	}

	load := startLoad(ctx, cl, fs, "/r")
	start := time.Now()
	startProc(t, "storage node", storage(5)...)
	waitFor("target 5 registered", "target 5: serving")
	out, err := run(t, "admin", "rebalance", "--wait")
	if err != nil || !strings.Contains(out, "rebalance done") {
		t.Fatalf("rebalance: %v\n%s", err, out)
	}
	t.Logf("node added and rebalanced in %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	st, err := cl.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range st.Targets { // 12 replicas over 5 targets
		if n := len(tg.Chains); n < 2 || n > 3 {
			t.Fatalf("after the rebalance target %d holds %d chains, want 2 or 3\n%s", tg.ID, n, status())
		}
	}
	if out, err := run(t, "admin", "rebalance"); err != nil || !strings.Contains(out, "0 moves to go") { // idempotent
		t.Fatalf("rebalance again: %v\n%s", err, out)
	}
	errs, ops := load.end()
	if len(errs) > 0 {
		t.Fatalf("%d of %d client operations failed during the rebalance, first: %v", len(errs), ops, errs[0])
	}
	t.Logf("%d client operations during the rebalance, none failed", ops)
	replicated(t, fs, metrics, 1, 2, 3, 4, 5) // the targets moved from dropped their chunks

	load = startLoad(ctx, cl, fs, "/d")

	start = time.Now()
	if out, err := run(t, "admin", "drain", "--node", "s2"); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	waitFor("a move off target 2", ": target 2 -> target")
	s2.Process.Kill() // SIGKILL, midway
	s2.Wait()
	out, err = run(t, "admin", "drain", "--node", "s2", "--wait")
	if err != nil || !strings.Contains(out, "drained: safe to stop") {
		t.Fatalf("drain --wait: %v\n%s", err, out)
	}
	t.Logf("node s2 drained, killed midway, in %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	errs, ops = load.end()
	if len(errs) > 0 {
		t.Fatalf("%d of %d client operations failed during the drain, first: %v", len(errs), ops, errs[0])
	}
	t.Logf("%d client operations during the drain, none failed", ops)
	written := fs.snapshot()
	for name, b := range written {
		if err := readBack(ctx, cl, name, b); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run(t, "admin", "retire", "--node", "s2"); err != nil {
		t.Fatalf("retire: %v\n%s", err, out)
	}
	s := status()
	for _, bad := range []string{"draining", "move chain", "target 2:", "syncing"} {
		if strings.Contains(s, bad) {
			t.Fatalf("status at the end shows %q:\n%s", bad, s)
		}
	}
	if !strings.Contains(s, "0 in flight, 0 to go") || !strings.Contains(s, "rebalance off") {
		t.Fatalf("status at the end:\n%s", s)
	}
	replicated(t, fs, metrics, 1, 3, 4, 5)
	t.Logf("%d files read back identical", len(written))
}
