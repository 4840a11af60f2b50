package sdk

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPathRules: every path call refuses a path that is not absolute, or
// holds an empty, "." or ".." name, with an error that wraps fs.ErrInvalid
// and names the path, and creates nothing; the paths the rule allows
// (a trailing slash, the root) still work.
func TestPathRules(t *testing.T) {
	c := startCluster(t, t.TempDir())
	defer c.Close()
	cl := connect(t, c)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.Mkdir(ctx, "/a/", 0o755); err != nil { // a trailing slash is allowed
		t.Fatalf("mkdir with a trailing slash: %v", err)
	}
	if err := cl.WriteFile(ctx, "/a/f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	bad := []string{"relative", "a/b", "", "/a/../../b", "/a/..", "/a/./g", "/.", "/..", "//g", "/a//g", "/a/g//"}
	calls := []struct {
		op string
		do func(p string) error
	}{
		{"mkdir", func(p string) error { return cl.Mkdir(ctx, p, 0o755) }},
		{"create", func(p string) error { _, err := cl.Create(ctx, p); return err }},
		{"writefile", func(p string) error { return cl.WriteFile(ctx, p, []byte("y")) }},
		{"open", func(p string) error { _, err := cl.Open(ctx, p); return err }},
		{"openfile", func(p string) error { _, err := cl.OpenFile(ctx, p, true); return err }},
		{"stat", func(p string) error { _, err := cl.Stat(ctx, p); return err }},
		{"readdir", func(p string) error { _, err := cl.ReadDir(ctx, p); return err }},
		{"remove", func(p string) error { return cl.Remove(ctx, p) }},
		{"rename from", func(p string) error { return cl.Rename(ctx, p, "/a/g") }},
		{"rename to", func(p string) error { return cl.Rename(ctx, "/a/f", p) }},
		{"symlink", func(p string) error { return cl.Symlink(ctx, "/a/f", p) }},
		{"link from", func(p string) error { return cl.Link(ctx, p, "/a/g") }},
		{"link to", func(p string) error { return cl.Link(ctx, "/a/f", p) }},
		{"readlink", func(p string) error { _, err := cl.Readlink(ctx, p); return err }},
		{"truncate", func(p string) error { return cl.Truncate(ctx, p, 0) }},
		{"chmod", func(p string) error { return cl.Chmod(ctx, p, 0o600) }},
		{"chown", func(p string) error { return cl.Chown(ctx, p, 1, 1) }},
		{"utimes", func(p string) error { return cl.Utimes(ctx, p, time.Unix(1, 0), time.Unix(2, 0)) }},
	}
	for _, call := range calls {
		for _, p := range bad {
			err := call.do(p)
			if !errors.Is(err, fs.ErrInvalid) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s %q: %v; want an error wrapping fs.ErrInvalid", call.op, p, err)
				continue
			}
			if !strings.Contains(err.Error(), `"`+p+`"`) {
				t.Errorf("%s %q: the error does not name the path: %v", call.op, p, err)
			}
		}
	}
	names := func(p string) []string {
		t.Helper()
		ents, err := cl.ReadDir(ctx, p)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if got := names("/"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("the root holds %q after the refused calls; want only a", got)
	}
	if got := names("/a"); !slices.Equal(got, []string{"f"}) {
		t.Errorf("/a holds %q after the refused calls; want only f", got)
	}
	if in, err := cl.Stat(ctx, "/a/f"); err != nil || in.Size() != 1 || in.Mode() != 0o644 || in.Nlink() != 1 {
		t.Errorf("/a/f after the refused calls: %v %v; want its 1 byte, mode 0644 and one link", in, err)
	}
	// Relative to a directory inode (the FUSE adapter's calls): names and
	// "" (the inode itself) pass, absolute paths and ".." do not.
	a, err := cl.Stat(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if in, err := cl.StatAt(ctx, a.Ino(), "f"); err != nil || in.Size() != 1 {
		t.Errorf("stat of a name relative to /a: %v %v", in, err)
	}
	if in, err := cl.StatAt(ctx, a.Ino(), ""); err != nil || in.Ino() != a.Ino() {
		t.Errorf("stat of /a by itself: %v %v", in, err)
	}
	for _, p := range []string{"/f", "..", "../a/f", "./f", "x//y"} {
		if _, err := cl.MkdirAt(ctx, a.Ino(), p, Owner{Mode: 0o755}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("mkdir %q relative to /a: %v; want fs.ErrInvalid", p, err)
		}
	}
	if got := names("/a"); !slices.Equal(got, []string{"f"}) {
		t.Errorf("/a holds %q after the refused relative calls; want only f", got)
	}
}
