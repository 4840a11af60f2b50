package meta

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sluicefs/sluice/proto/metapb"
)

// TestBadNamesRefused: through the gRPC server, a path with an empty, "."
// or ".." name, or NUL, is refused with InvalidArgument, whichever call
// carries it and whether it is absolute or relative to a directory inode;
// nothing is created, and the walk never climbs above "/" or the inode.
func TestBadNamesRefused(t *testing.T) {
	c, _ := apiServer(t)
	ctx := authed(t)
	d, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/d", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, &metapb.MakeRequest{Path: "/d/f", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	type req struct {
		at uint64
		p  string
	}
	bad := []req{
		{0, "/d/../../b"}, {0, "/d/.."}, {0, "/d/./g"}, {0, "/."}, {0, "/.."}, {0, "//g"}, {0, "/d//g"},
		{0, "/d/g//"}, {0, "/d/x\x00y"}, {0, "d/../g"},
		{d.Ino, ".."}, {d.Ino, "../g"}, {d.Ino, "./g"}, {d.Ino, "."}, {d.Ino, "x/../g"}, {d.Ino, "/g"}, {d.Ino, "g//h"},
	}
	calls := []struct {
		op string
		do func(r req) error
	}{
		{"mkdir", func(r req) error { _, err := c.Mkdir(ctx, &metapb.MakeRequest{At: r.at, Path: r.p}); return err }},
		{"create", func(r req) error { _, err := c.Create(ctx, &metapb.MakeRequest{At: r.at, Path: r.p}); return err }},
		{"symlink", func(r req) error {
			_, err := c.Symlink(ctx, &metapb.SymlinkRequest{At: r.at, Path: r.p, Target: "/d/f"})
			return err
		}},
		{"stat", func(r req) error { _, err := c.Stat(ctx, &metapb.PathRequest{At: r.at, Path: r.p}); return err }},
		{"list", func(r req) error { _, err := c.List(ctx, &metapb.ListRequest{At: r.at, Path: r.p}); return err }},
		{"open", func(r req) error { _, err := c.Open(ctx, &metapb.OpenRequest{At: r.at, Path: r.p}); return err }},
		{"unlink", func(r req) error { _, err := c.Unlink(ctx, &metapb.PathRequest{At: r.at, Path: r.p}); return err }},
		{"rmdir", func(r req) error { _, err := c.Rmdir(ctx, &metapb.PathRequest{At: r.at, Path: r.p}); return err }},
		{"rename to", func(r req) error {
			_, err := c.Rename(ctx, &metapb.RenameRequest{From: "/d/f", ToAt: r.at, To: r.p})
			return err
		}},
		{"link to", func(r req) error {
			_, err := c.Link(ctx, &metapb.LinkRequest{Path: "/d/f", NewAt: r.at, NewPath: r.p})
			return err
		}},
		{"setattr", func(r req) error {
			mode := uint32(0o600)
			_, err := c.Setattr(ctx, &metapb.SetattrRequest{At: r.at, Path: r.p, Mode: &mode})
			return err
		}},
	}
	for _, call := range calls {
		for _, r := range bad {
			if err := call.do(r); code(err) != codes.InvalidArgument {
				t.Errorf("%s %q at inode %d: %v; want InvalidArgument", call.op, r.p, r.at, err)
			}
		}
	}
	if _, err := c.Symlink(ctx, &metapb.SymlinkRequest{Path: "/d/l", Target: "/d/\x00"}); code(err) != codes.InvalidArgument {
		t.Errorf("symlink to a target holding NUL: %v; want InvalidArgument", err)
	}
	if _, err := c.BatchStat(ctx, &metapb.BatchStatRequest{Paths: []string{"/d/f", "/d/../d/f"}}); code(err) != codes.InvalidArgument {
		t.Errorf("batch stat with a '..' path: %v; want InvalidArgument", err)
	}
	names := func(p string) []string {
		t.Helper()
		l, err := c.List(ctx, &metapb.ListRequest{Path: p})
		if err != nil {
			t.Fatalf("list %s: %v", p, err)
		}
		var out []string
		for _, e := range l.Entries {
			out = append(out, e.Name)
		}
		return out
	}
	if got := names("/"); !slices.Equal(got, []string{"d"}) {
		t.Errorf("the root holds %q after the refused calls; want only d", got)
	}
	if got := names("/d"); !slices.Equal(got, []string{"f"}) {
		t.Errorf("/d holds %q after the refused calls; want only f", got)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/d/f"}); err != nil || in.Mode != 0o644 || in.Nlink != 1 {
		t.Errorf("/d/f after the refused calls: %v %v; want mode 0644, one link", in, err)
	}
	// What the rule allows: REST's paths without the leading slash, one
	// trailing slash, "" for the root or for the inode itself.
	ok := []req{{0, "d/f"}, {0, "/d/"}, {0, ""}, {0, "/"}, {d.Ino, ""}, {d.Ino, "f"}}
	for _, r := range ok {
		if _, err := c.Stat(ctx, &metapb.PathRequest{At: r.at, Path: r.p}); err != nil {
			t.Errorf("stat %q at inode %d: %v", r.p, r.at, err)
		}
	}
}
