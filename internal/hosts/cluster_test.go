package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSluiceCluster is the example: a meta replica on one host, three
// storage nodes on three more, and `sluice cp` (the SDK) on a fifth
// writing a file and reading it back, every process at its own address.
func TestSluiceCluster(t *testing.T) {
	bin, n, dir, token, tokenFile := sluiceHosts(t, 5)
	meta, client := n.Host(0), n.Host(4)
	cluster := meta.AddrPort(7400)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	server := func(h *Host, name, role string, part map[string]any, ready string) {
		t.Helper()
		conf, _ := json.Marshal(map[string]any{"dir": filepath.Join(dir, name), "token_file": tokenFile, role: part})
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, conf, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := h.Start(exec.Command(bin, "server", "--role", role, "--config", path))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Expect(ctx, ready); err != nil {
			t.Fatal(err)
		}
	}
	server(meta, "m1", "meta", map[string]any{"id": "m1", "raft_bind": meta.AddrPort(7401), "listen": cluster,
		"members": map[string]string{"m1": meta.AddrPort(7401)}, "chunk_size": 64 << 10, "stripe": 3,
		"expect_targets": 3, "replicas": 3}, "meta serving on")
	for i := 1; i <= 3; i++ {
		h := n.Host(i)
		server(h, fmt.Sprint("s", i), "storage", map[string]any{"cluster": cluster, "node_id": fmt.Sprint("s", i),
			"fabric_listen": h.AddrPort(7410), "targets": []int{i}, "chunk_size": 64 << 10}, "serving targets")
	}

	want := make([]byte, 1<<20)
	rand.Read(want)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := func(from, to string) error {
		p, err := client.Start(exec.Command(bin, "cp", "-q", "--cluster", cluster, "--token", token, from, to))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			return fmt.Errorf("sluice cp %s %s: %w: %s", from, to, err, p.Output())
		}
		return nil
	}
	// Until the storage nodes have registered, there is no chain table
	// to create a file on.
	for {
		err := cp(src, "sluice:/hello")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Log(err)
		time.Sleep(500 * time.Millisecond)
	}
	if err := cp("sluice:/hello", dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(want))
	}
}

// sluiceHosts is what a test of sluice processes on hosts needs: the
// binary ($SLUICE_BIN; the test skips without it), a Net of hosts, a
// directory, and a fresh cluster token written to tokenFile there.
func sluiceHosts(t *testing.T, hosts int) (bin string, n *Net, dir, token, tokenFile string) {
	t.Helper()
	bin = os.Getenv("SLUICE_BIN")
	if bin == "" {
		t.Skip("SLUICE_BIN is not set (the sluice binary: make build, then SLUICE_BIN=$PWD/bin/sluice)")
	}
	n = New(t, Config{Hosts: hosts})
	dir = t.TempDir()
	token = fmt.Sprintf("hosts-%x", time.Now().UnixNano())
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, n, dir, token, tokenFile
}
