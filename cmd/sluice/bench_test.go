package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int
		ok   bool
	}{
		{"4096", 4096, true}, {"4KiB", 4096, true}, {"1MiB", 1 << 20, true}, {"1GiB", 1 << 30, true},
		{"0", 0, true}, {"12B", 12, true}, {"2GiB", 0, false}, {"-1", 0, false}, {"1XB", 0, false}, {"MiB", 0, false},
	}
	for _, c := range cases {
		got, err := parseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestBenchFabric(t *testing.T) {
	for _, tr := range []string{"tcp", "local"} {
		var out bytes.Buffer
		f := fabricBenchFlags{transport: tr, size: "64KiB", duration: 100 * time.Millisecond}
		if err := benchFabric(context.Background(), &out, f, 64<<10); err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		for _, want := range []string{"read", "write", "call", "every byte checked"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("%s: output lacks %q:\n%s", tr, want, out.String())
			}
		}
	}
	if err := benchFabric(context.Background(), &bytes.Buffer{}, fabricBenchFlags{transport: "carrier-pigeon"}, 1); err == nil {
		t.Fatal("unknown transport accepted")
	}
}

func TestCLI(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "sluice ") {
		t.Fatalf("version: %v %q", err, out.String())
	}
	root = newRoot()
	root.SetArgs([]string{"bench", "fabric", "--size", "nonsense"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "bad size") {
		t.Fatalf("bad size: %v", err)
	}
}
