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
	// Until the storage nodes have registered, there is no chain table
	// to create a file on.
	if _, err := c.waitReplicated(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	want := make([]byte, 1<<20)
	rand.Read(want)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sluice(ctx, "cp", "-q", src, "sluice:/hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sluice(ctx, "cp", "-q", "sluice:/hello", dst); err != nil {
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
