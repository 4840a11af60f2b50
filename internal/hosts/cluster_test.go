package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSluiceCluster is the example: a meta replica on one host, three
// storage nodes on three more, and `sluice cp` (the SDK) on a fifth
// writing a file and reading it back, every process at its own address.
func TestSluiceCluster(t *testing.T) {
	sluiceBin(t)
	n := New(t, Config{Hosts: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startCluster(ctx, t, clusterConfig{Meta: n.Host(0), Storage: n.Hosts[1:4], Client: n.Host(4),
		Replicas: 3, ChunkSize: 64 << 10, Stripe: 3})
	dir := c.dir

	want := make([]byte, 1<<20)
	rand.Read(want)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := func(from, to string) error {
		_, err := c.run(ctx, "cp", "-q", from, to)
		return err
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
	bin = sluiceBin(t)
	n = New(t, Config{Hosts: hosts})
	dir = t.TempDir()
	token, tokenFile = writeToken(t, dir)
	return bin, n, dir, token, tokenFile
}
