package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
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

// clientLoad writes new files and reads the written ones back, over and
// over, until stopped, keeping every error a client saw.
type clientLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	ops  int
}

func startLoad(ctx context.Context, cl *sdk.Client, fs *files) *clientLoad {
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
			name, b := fmt.Sprintf("/w%d", i), fabrictest.RandBytes(uint64(1000+i), 200<<10+i)
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

// TestGrowRebalanceDrain: four `sluice server` storage processes and one
// meta; data written once; a fifth node added and `sluice admin
// rebalance --wait` run while a writer and a reader go on with no error;
// then a node drained and SIGKILLed midway: the drain completes from the
// survivors, every byte written reads back, and once the dead node is
// retired status shows nothing draining or moving.
func TestGrowRebalanceDrain(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	tokenFile := filepath.Join(dir, "token")
	writeJSON(t, filepath.Join(dir, "meta.json"), map[string]any{"dir": filepath.Join(dir, "m"), "token_file": tokenFile,
		"meta": map[string]any{"listen": addr, "expect_targets": 4, "replicas": 3, "stripe": 4, "chunk_size": 64 << 10, "max_moves": 2}})
	startProc(t, "meta serving", "server", "--role", "meta", "--config", filepath.Join(dir, "meta.json"))
	storage := func(i int) []string {
		cfg := filepath.Join(dir, fmt.Sprintf("s%d.json", i))
		writeJSON(t, cfg, map[string]any{"dir": filepath.Join(dir, fmt.Sprint("s", i)), "token_file": tokenFile,
			"storage": map[string]any{"cluster": addr, "node_id": fmt.Sprint("s", i), "targets": []int{i}, "chunk_size": 64 << 10}})
		return []string{"server", "--role", "storage", "--config", cfg}
	}
	s2 := startProc(t, "storage node", storage(2)...)
	for _, i := range []int{1, 3, 4} {
		startProc(t, "storage node", storage(i)...)
	}
	token, _ := os.ReadFile(tokenFile)
	t.Setenv("SLUICE_CLUSTER", addr)
	t.Setenv("SLUICE_TOKEN", strings.TrimSpace(string(token)))
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cl, err := sdk.Connect(ctx, sdk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	status := func() string {
		var b bytes.Buffer
		if st, err := cl.ClusterStatus(ctx); err == nil {
			writeStatus(&b, st)
		}
		return b.String()
	}
	waitFor := func(what, s string) {
		t.Helper()
		for !strings.Contains(status(), s) {
			if ctx.Err() != nil {
				t.Fatalf("never: %s\n%s", what, status())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("chain table", "chain 4 ")
	fs := &files{data: map[string][]byte{}}
	for i := range 16 {
		b := fabrictest.RandBytes(uint64(i), 1<<20+i)
		if err := cl.WriteFile(ctx, fmt.Sprint("/f", i), b); err != nil {
			t.Fatal(err)
		}
		fs.put(fmt.Sprint("/f", i), b)
	}

	load := startLoad(ctx, cl, fs)
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
	errs, ops := load.end()
	if len(errs) > 0 {
		t.Fatalf("%d of %d client operations failed during the moves, first: %v", len(errs), ops, errs[0])
	}
	t.Logf("%d client operations during the moves, none failed", ops)
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
	t.Logf("%d files read back identical", len(written))
}
