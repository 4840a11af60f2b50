package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/server/cluster"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestFileCommands: mkdir, cp in and out (with the progress bar), ls, cat,
// status and rm against an embedded cluster.
func TestFileCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("SLUICE_CLUSTER", c.Addr)
	t.Setenv("SLUICE_TOKEN", c.Token)
	dir := t.TempDir()
	src := filepath.Join(dir, "in.bin")
	data := fabrictest.RandBytes(9, 10<<20+12345)
	os.WriteFile(src, data, 0o644)
	if _, err := run(t, "mkdir", "sluice:/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "cp", src, "sluice:/x/f"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "ls", "sluice:/x")
	if err != nil || !strings.Contains(out, "file") || !strings.Contains(out, "f") {
		t.Fatalf("ls: %q %v", out, err)
	}
	back := filepath.Join(dir, "out.bin")
	if _, err := run(t, "cp", "sluice:/x/f", back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("copied out differently from what was copied in")
	}
	small := filepath.Join(dir, "small.txt")
	os.WriteFile(small, []byte("hello sluice\n"), 0o644)
	run(t, "cp", small, "sluice:/x/s")
	if out, err := run(t, "cat", "sluice:/x/s"); err != nil || out != "hello sluice\n" {
		t.Fatalf("cat: %q %v", out, err)
	}
	if out, err := run(t, "status"); err != nil || !strings.Contains(out, "chain") || !strings.Contains(out, "Leader") ||
		!strings.Contains(out, "iB free for files") || !strings.Contains(out, "1 small files, 13 B, kept by the metadata service") {
		t.Fatalf("status: %q %v", out, err)
	}
	if _, err := run(t, "cp", src, back); err == nil {
		t.Fatal("cp between two local files accepted")
	}
	for _, p := range []string{"sluice:/x/f", "sluice:/x/s", "sluice:/x"} {
		if _, err := run(t, "rm", p); err != nil {
			t.Fatalf("rm %s: %v", p, err)
		}
	}
	if _, err := run(t, "cat", "sluice:/x/f"); err == nil {
		t.Fatal("cat of a removed file succeeded")
	}
	t.Setenv("SLUICE_TOKEN", "wrong")
	if _, err := run(t, "ls", "sluice:/"); err == nil {
		t.Fatal("ls with a wrong token succeeded")
	}
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	cfg := demoConfig{samples: 3000, minSize: 64, maxSz: 8 << 10, batch: 64, epochs: 2, quiet: true}
	if err := demo(context.Background(), &out, cfg); err != nil {
		t.Fatalf("%v; demo said:\n%s", err, out.String())
	}
	for epoch := range 2 {
		if want := fmt.Sprintf("epoch %d: 3000 samples", epoch); !strings.Contains(out.String(), want) {
			t.Fatalf("no %q; demo said:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "each sample exactly once: yes, contents checked: yes") != 2 {
		t.Fatalf("demo said:\n%s", out.String())
	}
}
