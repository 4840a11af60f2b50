package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// mounted reports whether dir is a mount point, per /proc/self/mountinfo.
func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// TestMountCommand: `sluice mount` serves the cluster at the mount point
// (what cp writes there the SDK reads) and unmounts on SIGTERM and on
// SIGINT, lazily when a file is still open there. Its client's metrics on
// --http count what went through the mount, beside the mount's own.
func TestMountCommand(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clusterDir := t.TempDir()
	c, err := cluster.Start(ctx, cluster.Config{Dir: clusterDir, Targets: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		sock := filepath.Join(t.TempDir(), "agent.sock")
		httpAddr := testproc.FreeAddr(t)
		proc := startProc(t, "mounted", "mount", "--cluster", c.Addr, "--token", c.Token, "--agent-socket", sock, "--http", httpAddr, "--cache", "8388608", dir)
		if !mounted(t, dir) {
			t.Fatalf("%s is not a mount point", dir)
		}
		name := filepath.Join(dir, "f"+sig.String())
		if err := os.WriteFile(name, []byte("through the mount"), 0o644); err != nil {
			t.Fatal(err)
		}
		var held *os.File
		if i == 1 { // keep a file open: the unmount must detach lazily
			if held, err = os.Open(name); err != nil {
				t.Fatal(err)
			}
		}
		f, err := cl.Open(ctx, "/f"+sig.String())
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if string(b[:n]) != "through the mount" {
			t.Fatalf("the SDK reads %q", b[:n])
		}
		mfs := scrapeOK(t, httpAddr, "")
		if w := sumOf(mfs, "sluice_client_write_bytes_total"); w < float64(len("through the mount")) {
			t.Errorf("the mount's client wrote %v bytes by its metrics, after a write of %d", w, len("through the mount"))
		}
		if l := sumOf(mfs, "sluice_mount_cache_limit_bytes"); l != 8<<20 {
			t.Errorf("the mount's cache limit is %v by its metrics, after --cache 8388608", l)
		}
		if i == 0 {
			// A small file's bytes are kept by the metadata service,
			// none on storage; a larger one's are in chunk files.
			if n := chunkFiles(t, clusterDir); n != 0 {
				t.Fatalf("%d chunk files on storage after a write of %d bytes", n, len("through the mount"))
			}
			if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 10000), 0o644); err != nil {
				t.Fatal(err)
			}
			if n := chunkFiles(t, clusterDir); n == 0 {
				t.Fatal("no chunk file on storage after a write of 10,000 bytes")
			}
		}
		if i == 0 { // the mount process is the local agent too
			ac, err := sdk.DialAgent(sock, 32<<20, 64, false)
			if err != nil {
				t.Fatal(err)
			}
			agentReadAll(t, ac, "/f"+sig.String(), []byte("through the mount"))
			ac.Close()
		}
		if err := proc.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- proc.Wait() }()
		if held != nil {
			// Detached at once, served until the last file closes.
			for deadline := time.Now().Add(10 * time.Second); mounted(t, dir); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s is still mounted 10s after %v", dir, sig)
				}
			}
			b := make([]byte, 7)
			if _, err := held.ReadAt(b, 0); err != nil || string(b) != "through" {
				t.Fatalf("an open file after the lazy unmount: %q %v", b, err)
			}
			select {
			case err := <-done:
				t.Fatalf("sluice mount exited while a file was open there: %v", err)
			default:
			}
			held.Close()
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("after %v: %v", sig, err)
			}
		case <-time.After(30 * time.Second):
			proc.Process.Kill()
			<-done
			t.Fatalf("sluice mount did not exit after %v", sig)
		}
		if mounted(t, dir) {
			t.Fatalf("%s is still mounted after %v", dir, sig)
		}
	}
}

// chunkFiles counts the chunk files under a cluster's directory.
func chunkFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) == "chunks" {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
