package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterGrowsAndShrinks is issue 17's multi-host test: 3 meta
// replicas and 4 storage nodes on 7 hosts, each started from one cluster
// spec; files written with `sluice cp` from an eighth host; a fifth storage
// node added on a ninth and `sluice admin rebalance --wait` run while
// another file is written; a node drained while the meta leader is
// killed; another host killed (its
// process SIGKILLed, its link cut) and replaced by draining it; every byte
// written reads back identical at the end.
func TestClusterGrowsAndShrinks(t *testing.T) {
	bin, n, dir, token, tokenFile := sluiceHosts(t, 9)
	metaHosts, storageHosts, client, added := n.Hosts[0:3], n.Hosts[3:7], n.Host(7), n.Host(8)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// The spec: every process reads its own part of it.
	spec := fmt.Sprintf("token_file: %s\nreplicas: 3\nchunk_size: 65536\nstripe: 4\nmax_moves: 2\nmeta:\n", tokenFile)
	var cluster []string
	for i, h := range metaHosts {
		spec += fmt.Sprintf("  - {name: m%d, address: %q, raft_address: %q, dir: %q}\n", i+1, h.AddrPort(7400), h.AddrPort(7401), filepath.Join(dir, fmt.Sprint("m", i+1)))
		cluster = append(cluster, h.AddrPort(7400))
	}
	storageLine := func(i int, h *Host) string {
		return fmt.Sprintf("  - {name: s%d, address: %q, dir: %q, targets: [%d]}\n", i, h.AddrPort(7410), filepath.Join(dir, fmt.Sprint("s", i)), i)
	}
	spec += "storage:\n"
	for i, h := range storageHosts {
		spec += storageLine(i+1, h)
	}
	writeSpec := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	specFile := writeSpec("cluster.yaml", spec)
	start := func(h *Host, spec, node, ready string) *Proc {
		t.Helper()
		p, err := h.Start(exec.Command(bin, "server", "--spec", spec, "--node", node))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Expect(ctx, ready); err != nil {
			t.Fatal(err)
		}
		return p
	}
	metas := map[string]*Proc{}
	for i, h := range metaHosts {
		metas[fmt.Sprint("m", i+1)] = start(h, specFile, fmt.Sprint("m", i+1), "meta serving on")
	}
	procs := map[int]*Proc{}
	for i, h := range storageHosts {
		procs[i+1] = start(h, specFile, fmt.Sprint("s", i+1), "serving targets")
	}

	// sluice runs the CLI on the client host and returns its output.
	sluice := func(args ...string) (string, error) {
		args = append(args, "--cluster", strings.Join(cluster, ","), "--token", token)
		p, err := client.Start(exec.Command(bin, args...))
		if err != nil {
			t.Fatal(err)
		}
		err = p.Wait()
		if err != nil {
			return p.Output(), fmt.Errorf("sluice %v: %w: %s", args, err, p.Output())
		}
		return p.Output(), nil
	}
	written := map[string][]byte{}
	put := func(name string, size int) error {
		b := make([]byte, size)
		rand.Read(b)
		src := filepath.Join(dir, "src-"+strings.TrimPrefix(name, "/"))
		if err := os.WriteFile(src, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := sluice("cp", "-q", src, "sluice:"+name); err != nil {
			return err
		}
		written[name] = b
		return nil
	}
	// Until the storage nodes have registered there is no chain table.
	for {
		err := put("/f0", 1<<20)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i := 1; i < 4; i++ {
		if err := put(fmt.Sprint("/f", i), 1<<20+i); err != nil {
			t.Fatal(err)
		}
	}
	status := func() string {
		out, err := sluice("status")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Grow: a fifth node, from the spec with it added, and a rebalance
	// while a file is written.
	began := time.Now()
	specFile2 := writeSpec("cluster2.yaml", spec+storageLine(5, added))
	start(added, specFile2, "s5", "serving targets")
	wrote := make(chan error, 1)
	go func() { wrote <- put("/during-rebalance", 3<<20) }()
	// 12 replicas over 5 targets: two move to the new one.
	if out, err := sluice("admin", "rebalance", "--wait"); err != nil || !strings.Contains(out, "rebalance done") || !strings.Contains(out, "moves 2/2 done") {
		t.Fatalf("rebalance: %v\n%s", err, out)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("a write during the rebalance: %v", err)
	}
	if s := status(); !strings.Contains(s, "target 5: serving") || strings.Contains(s, "target 5: serving at s5 ("+added.AddrPort(7410)+"), chains none") {
		t.Fatalf("target 5 took no chain:\n%s", s)
	}
	t.Logf("node added and rebalanced in %v", time.Since(began).Round(time.Millisecond))

	// Shrink: drain s2, and kill the meta leader as it starts: the drain
	// is in the map, and the next leader carries it to the end.
	// Links capped at 2 MB/s make each move take a while (about a second).
	capped := append([]*Host{added}, storageHosts...)
	for _, h := range capped {
		if err := h.SetRate(2 << 20); err != nil {
			t.Fatal(err)
		}
	}
	began = time.Now()
	if out, err := sluice("admin", "drain", "--node", "s2"); err != nil {
		t.Fatalf("drain s2: %v\n%s", err, out)
	}
	leader, _, _ := strings.Cut(strings.TrimPrefix(status(), "metadata: leader "), "@")
	if metas[leader] == nil {
		t.Fatalf("no meta leader in the status:\n%s", status())
	}
	metas[leader].Kill()
	out, err := sluice("admin", "drain", "--node", "s2", "--wait")
	if err != nil || !strings.Contains(out, "drained") {
		t.Fatalf("drain s2 after the leader %s died: %v\n%s", leader, err, out)
	}
	var togo int
	if _, err := fmt.Sscanf(out[strings.Index(out, ": ")+2:], "%d moves to go", &togo); err != nil || togo == 0 {
		t.Fatalf("the drain was over before the leader died (%v):\n%s", err, out)
	}
	for _, h := range capped {
		if err := h.SetRate(0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("node s2 drained, meta leader %s killed midway, in %v", leader, time.Since(began).Round(time.Millisecond))

	// Kill a host: s3's process dies and its link goes; draining it
	// replaces it from the surviving replicas.
	began = time.Now()
	procs[3].Kill()
	if err := storageHosts[2].SetLink(false); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(status(), "target 3: offline") {
		if ctx.Err() != nil {
			t.Fatalf("target 3 never offline:\n%s", status())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out, err := sluice("admin", "drain", "--node", "s3", "--wait"); err != nil || !strings.Contains(out, "drained") {
		t.Fatalf("replace s3: %v\n%s", err, out)
	}
	t.Logf("dead node s3 replaced in %v", time.Since(began).Round(time.Millisecond))

	for name, want := range written {
		dst := filepath.Join(dir, "dst-"+strings.TrimPrefix(name, "/"))
		if _, err := sluice("cp", "-q", "sluice:"+name, dst); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: read back %d bytes that differ from the %d written", name, len(got), len(want))
		}
	}
	s := status()
	if strings.Contains(s, "move chain") || !strings.Contains(s, "0 in flight, 0 to go") {
		t.Fatalf("moves left at the end:\n%s", s)
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "chain ") && strings.Count(line, ":serving") != 3 {
			t.Fatalf("a chain not fully replicated at the end: %s\n%s", line, s)
		}
	}
	t.Logf("%d files read back identical", len(written))
}
