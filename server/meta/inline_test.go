package meta

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicefs/sluice/fsmeta"
)

// contentStored is what the store holds under file ino's content key.
func contentStored(t *testing.T, ns *Namespace, ino uint64) []byte {
	t.Helper()
	v, err := get(dbReader{ns.db}, contentKey(ino))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCloseInline: a close with the whole content keeps it in the store
// (inode and bytes as of one moment), a truncate cuts it, a close from a
// session that wrote chunks ends it, another open session refuses it, and
// the content goes with the file's last name; the session ends either way.
func TestCloseInline(t *testing.T) {
	ns := newNS(t)
	w := Writer{Client: 7, Session: 1}
	in := must(ns.CreateOpen(RootIno, "f", Attrs{Mode: 0o644, Now: 2000}, w))(t)
	data := bytes.Repeat([]byte("sluice"), 500) // 3000 bytes
	if err := ns.CloseInline(in.Ino, 7, 1, data, 3500, false, 3000); err != nil {
		t.Fatal(err)
	}
	got, content, err := ns.Content(in.Ino)
	if err != nil || got.Size != 3500 || got.Inline != 3000 || !bytes.Equal(content, data) || got.MtimeNs != 3000 {
		t.Fatalf("after close inline: %v, %d bytes (want 3000 of size 3500), %v", got, len(content), err)
	}
	if open, err := ns.HasSessions(in.Ino); err != nil || open {
		t.Fatalf("session still open after close inline: %v %v", open, err)
	}
	// A plain stat carries the count, not the bytes.
	if st := must(ns.Stat(in.Ino))(t); st.Inline != 3000 {
		t.Fatalf("stat: inline %d", st.Inline)
	}

	// Truncate cuts the bytes; extending keeps them.
	if _, err := ns.Setattr(in.Ino, SetAttr{Size: new(uint64(100))}, 4000); err != nil {
		t.Fatal(err)
	}
	if got, content, _ := ns.Content(in.Ino); got.Inline != 100 || !bytes.Equal(content, data[:100]) {
		t.Fatalf("after truncate to 100: inline %d, %q", got.Inline, content)
	}
	if _, err := ns.Setattr(in.Ino, SetAttr{Size: new(uint64(9000))}, 4000); err != nil {
		t.Fatal(err)
	}
	if got, content, _ := ns.Content(in.Ino); got.Inline != 100 || got.Size != 9000 || len(content) != 100 {
		t.Fatalf("after extending to 9000: inline %d size %d", got.Inline, got.Size)
	}

	// Another writer's session refuses a hand-over; the writer's own
	// session stays for its close through chunks.
	if err := ns.OpenSession(in.Ino, 7, 2, 5000); err != nil {
		t.Fatal(err)
	}
	if err := ns.OpenSession(in.Ino, 8, 1, 5000); err != nil {
		t.Fatal(err)
	}
	if err := ns.CloseInline(in.Ino, 7, 2, []byte("x"), 1, false, 6000); !errors.Is(err, fsmeta.ErrNotInline) {
		t.Fatalf("close inline beside another writer: %v", err)
	}
	if got, content, _ := ns.Content(in.Ino); got.Inline != 100 || len(content) != 100 {
		t.Fatalf("a refused hand-over changed the content: inline %d", got.Inline)
	}
	// A close of a session that wrote chunks (written mark) ends the
	// content; one that wrote nothing leaves it.
	if err := ns.CloseSession(in.Ino, 8, 1, new(uint64(9000)), new(uint64(0)), false, 6000); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ns.Content(in.Ino); got.Inline != 100 {
		t.Fatalf("a close that wrote nothing ended the content: inline %d", got.Inline)
	}
	if err := ns.CloseSession(in.Ino, 7, 2, new(uint64(9000)), new(uint64(100)), false, 6000); err != nil {
		t.Fatal(err)
	}
	if got, content, _ := ns.Content(in.Ino); got.Inline != 0 || content != nil || contentStored(t, ns, in.Ino) != nil {
		t.Fatalf("after a close through chunks: inline %d, %d bytes stored", got.Inline, len(contentStored(t, ns, in.Ino)))
	}

	// An inline file no writer holds leaves the collector nothing when its
	// last name goes; the content goes with it.
	e := must(ns.CreateOpen(RootIno, "e", Attrs{Mode: 0o644, Now: 6500}, Writer{Client: 7, Session: 4}))(t)
	if err := ns.CloseInline(e.Ino, 7, 4, []byte("e"), 1, false, 6500); err != nil {
		t.Fatal(err)
	}
	if err := ns.Unlink(RootIno, "e", 6500); err != nil {
		t.Fatal(err)
	}
	if q := must(ns.Garbage(10))(t); len(q) != 0 || contentStored(t, ns, e.Ino) != nil {
		t.Fatalf("after unlinking a file with no chunks: queue %v", q)
	}
	if err := ns.Unlink(RootIno, "f", 6600); err != nil { // chunks below its mark: queued
		t.Fatal(err)
	}
	if q := must(ns.Garbage(10))(t); len(q) != 1 || q[0].Ino != in.Ino {
		t.Fatalf("after unlinking a file written through chunks: queue %v", q)
	}

	// The content goes with the last name, and a writer's hand-over after
	// that ends its session and stores nothing.
	g := must(ns.CreateOpen(RootIno, "g", Attrs{Mode: 0o644, Now: 7000}, Writer{Client: 7, Session: 3}))(t)
	if err := ns.CloseInline(g.Ino, 7, 3, []byte("abc"), 3, true, 7000); err != nil {
		t.Fatal(err)
	}
	if err := ns.Unlink(RootIno, "g", 8000); err != nil {
		t.Fatal(err)
	}
	if v := contentStored(t, ns, g.Ino); v != nil {
		t.Fatalf("unlinked file's content still stored: %q", v)
	}
	if q := must(ns.Garbage(10))(t); len(q) != 2 || q[1].Ino != g.Ino {
		t.Fatalf("a file unlinked while a writer holds it is not queued: %v", q)
	}
	if err := ns.CloseInline(g.Ino, 7, 3, []byte("abcd"), 4, false, 9000); err != nil {
		t.Fatalf("hand-over after unlink: %v", err)
	}
	if v := contentStored(t, ns, g.Ino); v != nil {
		t.Fatalf("hand-over after unlink stored %q", v)
	}
	if open, _ := ns.HasSessions(g.Ino); open {
		t.Fatal("hand-over after unlink left its session open")
	}
	if _, _, err := ns.Content(g.Ino); !errors.Is(err, fsmeta.ErrStale) {
		t.Fatalf("content of an unlinked file: %v", err)
	}
}
