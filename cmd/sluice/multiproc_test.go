package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
)

// TestMain runs `sluice ARGS...` in a child process (role "sluice", with
// the arguments as a JSON list) for tests that need one.
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"sluice": func(spec string) error {
		var argv []string
		if err := json.Unmarshal([]byte(spec), &argv); err != nil {
			return err
		}
		root := newRoot()
		root.SetArgs(argv)
		return root.Execute()
	}})
}

// startProc runs `sluice ARGS...` as a child process and waits for its
// first line of output, which must contain want.
func startProc(t *testing.T, want string, args ...string) *exec.Cmd {
	t.Helper()
	return startChild(t, want, args...).Cmd
}

// startChild is startProc returning the child, whose standard error the
// test can read.
func startChild(t *testing.T, want string, args ...string) *testproc.Proc {
	t.Helper()
	b, _ := json.Marshal(args)
	p := testproc.Start(t, testproc.Command("sluice", string(b)))
	p.Expect(t, want, 60*time.Second)
	return p
}

func writeJSON(t *testing.T, path string, v any) {
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// procCluster is a meta process and the storage processes of a test, each
// a child started from a JSON config written in dir, every one at a
// loopback address and with the token in tokenFile.
type procCluster struct {
	t                    *testing.T
	dir, addr, tokenFile string
}

// startMetaProc writes meta.json, the fields of meta plus its listen
// address, and starts the meta process.
func startMetaProc(t *testing.T, meta map[string]any) *procCluster {
	t.Helper()
	dir := t.TempDir()
	c := &procCluster{t: t, dir: dir, addr: testproc.FreeAddr(t), tokenFile: filepath.Join(dir, "token")}
	meta["listen"] = c.addr
	writeJSON(t, filepath.Join(dir, "meta.json"), map[string]any{"dir": filepath.Join(dir, "m"), "token_file": c.tokenFile, "meta": meta})
	startProc(t, "meta serving", "server", "--role", "meta", "--config", filepath.Join(dir, "meta.json"))
	return c
}

// storageArgs writes storage node s<i>'s config, holding target i and the
// fields of extra, its HTTP server at httpAddr unless that is empty, and
// returns the arguments that start it.
func (c *procCluster) storageArgs(i int, httpAddr string, extra map[string]any) []string {
	c.t.Helper()
	part := map[string]any{"cluster": c.addr, "node_id": fmt.Sprint("s", i), "targets": []int{i}}
	for k, v := range extra {
		part[k] = v
	}
	conf := map[string]any{"dir": filepath.Join(c.dir, fmt.Sprint("s", i)), "token_file": c.tokenFile, "storage": part}
	if httpAddr != "" {
		conf["http"] = httpAddr
	}
	path := filepath.Join(c.dir, fmt.Sprintf("s%d.json", i))
	writeJSON(c.t, path, conf)
	return []string{"server", "--role", "storage", "--config", path}
}

// watchCluster connects to the cluster at addr with the token in
// tokenFile (set as SLUICE_CLUSTER and SLUICE_TOKEN too, for the CLI run in
// the test) until ctx ends, and returns the client, a function returning
// `sluice status`, and one waiting until the status shows s.
func watchCluster(ctx context.Context, t *testing.T, addr, tokenFile string) (*sdk.Client, func() string, func(what, s string)) {
	t.Helper()
	token, _ := os.ReadFile(tokenFile)
	t.Setenv("SLUICE_CLUSTER", addr)
	t.Setenv("SLUICE_TOKEN", strings.TrimSpace(string(token)))
	cl, err := sdk.Connect(ctx, sdk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
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
	return cl, status, waitFor
}

// TestSeparateProcesses: `sluice server` as one meta and three storage
// processes, at the SDK issue's size. 256 MiB copied in with `sluice cp`
// survives SIGKILL of a storage process: read whole through a local agent's
// rings at once (batched reads that hit the dead process fall back to
// retried single reads) and copied out whole with `sluice cp` once mgmtd
// has noticed, writes go on, the process restarts on its data, resyncs,
// serves again, and everything still reads back.
func TestSeparateProcesses(t *testing.T) {
	c := startMetaProc(t, map[string]any{"expect_targets": 3, "replicas": 3, "stripe": 3, "chunk_size": 1 << 20})
	dir, addr, tokenFile := c.dir, c.addr, c.tokenFile
	storageArgs := func(i int) []string { return c.storageArgs(i, "", nil) }
	procs := map[int]*exec.Cmd{}
	for i := 1; i <= 3; i++ {
		procs[i] = startProc(t, "storage node", storageArgs(i)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, _, waitFor := watchCluster(ctx, t, addr, tokenFile)
	waitFor("chain table", "chain 1")
	put := func(name string, data []byte) {
		t.Helper()
		if err := cl.WriteFile(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, data []byte) {
		t.Helper()
		f, err := cl.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if n, err := f.ReadAt(got, 0); n != len(data) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(got, data) {
			t.Fatalf("%s: read %d bytes (%v), equal=%v", name, n, err, bytes.Equal(got, data))
		}
	}
	// copyOut copies name out with `sluice cp` and compares it with data.
	copyOut := func(name string, data []byte) {
		t.Helper()
		out := filepath.Join(dir, "out.bin")
		if _, err := run(t, "cp", "sluice:"+name, out); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(out)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s copied out: %d bytes of %d (%v), equal=%v", name, len(got), len(data), err, bytes.Equal(got, data))
		}
		os.Remove(out)
	}
	start := time.Now()
	big := fabrictest.RandBytes(1, 256<<20)
	in := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(in, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "cp", in, "sluice:/big"); err != nil {
		t.Fatal(err)
	}
	os.Remove(in)
	t.Logf("256 MiB copied in: %v", time.Since(start).Round(time.Millisecond))
	agent, err := sdk.NewAgent(cl, sdk.AgentConfig{Path: filepath.Join(dir, "agent.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	ac, err := sdk.DialAgent(filepath.Join(dir, "agent.sock"), 32<<20, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	b := fabrictest.RandBytes(2, 1<<20)
	procs[2].Process.Kill() // SIGKILL
	procs[2].Wait()
	start = time.Now()
	agentReadAll(t, ac, "/big", big)
	t.Logf("256 MiB read through the agent just after a storage process died: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	copyOut("/big", big)
	t.Logf("256 MiB copied out with a storage process dead: %v", time.Since(start).Round(time.Millisecond))
	put("/b", b)
	waitFor("target 2 offline", "target 2: offline")
	procs[2] = startProc(t, "storage node", storageArgs(2)...)
	start = time.Now()
	waitFor("target 2 serving", "target 2: serving")
	t.Logf("target 2 resynced: %v", time.Since(start).Round(time.Millisecond))
	for range 3 { // reads rotate over the replicas: one of these is target 2's
		check("/b", b)
	}
	copyOut("/big", big)
}
