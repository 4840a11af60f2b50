package meta

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/server/gateway"
)

const token = "test-cluster-token"

// apiServer starts a one-replica group, its gRPC server with token auth,
// and the REST gateway in front of it.
func apiServer(t *testing.T) (metapb.MetaClient, *httptest.Server) {
	c, hs, _, _ := apiServerWithReplica(t)
	return c, hs
}

func apiServerWithMetrics(t *testing.T) (metapb.MetaClient, *httptest.Server, *Metrics) {
	c, hs, m, _ := apiServerWithReplica(t)
	return c, hs, m
}

func apiServerWithReplica(t *testing.T) (metapb.MetaClient, *httptest.Server, *Metrics, *Replica) {
	r, err := StartReplica(ReplicaConfig{ID: "solo", Dir: t.TempDir(), Bind: "127.0.0.1:0", RootLayout: rootLayout, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.Bootstrap(map[string]string{"solo": r.Addr()}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !r.IsLeader(); {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	unary, stream := auth.TokenAuth(token)
	metrics := NewMetrics(r)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(metrics.Interceptor(), unary), grpc.StreamInterceptor(stream))
	metapb.RegisterMetaServer(gs, NewService(r))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	gw, err := gateway.Gateway(context.Background(), ln.Addr().String(), nil, metapb.RegisterMetaHandlerFromEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	t.Cleanup(hs.Close)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return metapb.NewMetaClient(conn), hs, metrics, r
}

func authed(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func code(err error) codes.Code { return status.Code(err) }

func TestGRPCService(t *testing.T) {
	c, _ := apiServer(t)
	if _, err := c.Stat(context.Background(), &metapb.PathRequest{Path: "/"}); code(err) != codes.Unauthenticated {
		t.Fatalf("call without the token: %v", err)
	}
	bad := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")
	if _, err := c.Stat(bad, &metapb.PathRequest{Path: "/"}); code(err) != codes.Unauthenticated {
		t.Fatalf("call with a wrong token: %v", err)
	}
	ctx := authed(t)
	if _, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/data", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	f, err := c.Create(ctx, &metapb.MakeRequest{Path: "/data/a", Mode: 0o644, Uid: 5})
	if err != nil || f.Type != metapb.InodeType_FILE || f.Uid != 5 {
		t.Fatalf("create: %v %v", f, err)
	}
	if _, err := c.Rename(ctx, &metapb.RenameRequest{From: "/data/a", To: "/data/b"}); err != nil {
		t.Fatal(err)
	}
	l, err := c.List(ctx, &metapb.ListRequest{Path: "/data"})
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "b" {
		t.Fatalf("list: %v %v", l, err)
	}
	cases := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"exists", func() error { _, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/data"}); return err }(), codes.AlreadyExists},
		{"missing", func() error { _, err := c.Stat(ctx, &metapb.PathRequest{Path: "/nope"}); return err }(), codes.NotFound},
		{"NUL in a name", func() error { _, err := c.Create(ctx, &metapb.MakeRequest{Path: "/data/x\x00y"}); return err }(), codes.InvalidArgument},
		{"long name", func() error {
			_, err := c.Create(ctx, &metapb.MakeRequest{Path: "/data/" + strings.Repeat("n", 300)})
			return err
		}(), codes.InvalidArgument},
		{"rmdir non-empty", func() error { _, err := c.Rmdir(ctx, &metapb.PathRequest{Path: "/data"}); return err }(), codes.FailedPrecondition},
		{"into itself", func() error {
			_, err := c.Rename(ctx, &metapb.RenameRequest{From: "/data", To: "/data/inner"})
			return err
		}(), codes.FailedPrecondition},
		{"the root", func() error { _, err := c.Rmdir(ctx, &metapb.PathRequest{Path: "/"}); return err }(), codes.InvalidArgument},
	}
	for _, tc := range cases {
		if code(tc.err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	bs, err := c.BatchStat(ctx, &metapb.BatchStatRequest{Paths: []string{"/data/b", "/nope", "/data"}})
	if err != nil || len(bs.Inodes) != 3 || bs.Inodes[0].Type != metapb.InodeType_FILE || bs.Inodes[1].Type != 0 || bs.Inodes[2].Type != metapb.InodeType_DIRECTORY {
		t.Fatalf("batch stat: %v %v", bs, err)
	}
	st, err := c.Status(ctx, &metapb.StatusRequest{})
	if err != nil || st.State != "Leader" || len(st.Members) != 1 || st.Inodes != 3 {
		t.Fatalf("status: %v %v", st, err)
	}
}

func TestRESTGateway(t *testing.T) {
	c, hs := apiServer(t)
	if _, err := c.Mkdir(authed(t), &metapb.MakeRequest{Path: "/data", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	get := func(path string, withToken bool) (int, map[string]any) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if withToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	if code, body := get("/v1/stat/data", true); code != 200 || body["type"] != "DIRECTORY" {
		t.Fatalf("GET /v1/stat/data: %d %v", code, body)
	}
	if code, _ := get("/v1/stat/data", false); code != http.StatusUnauthorized {
		t.Fatalf("GET without the token: %d", code)
	}
	if code, _ := get("/v1/stat/missing", true); code != http.StatusNotFound {
		t.Fatalf("GET of a missing path: %d", code)
	}
	if code, body := get("/v1/cluster/status", true); code != 200 || body["state"] != "Leader" {
		t.Fatalf("GET /v1/cluster/status: %d %v", code, body)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/v1/create", strings.NewReader(`{"path": "/data/f", "mode": 420}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/create: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if code, body := get("/v1/list/data", true); code != 200 || !strings.Contains(fmt2(body), `"f"`) {
		t.Fatalf("GET /v1/list/data: %d %v", code, body)
	}
}

func fmt2(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestOpenAPICommitted: the OpenAPI description generated from the same
// rules is in the repository and describes the REST paths.
func TestOpenAPICommitted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "proto", "openapi", "meta", "v1", "service.swagger.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/cluster/status", "/v1/stat/{path}", "/v1/rename"} {
		if !strings.Contains(string(b), p) {
			t.Errorf("OpenAPI file lacks %s", p)
		}
	}
}

func TestMetrics(t *testing.T) {
	c, _, m := apiServerWithMetrics(t)
	ctx := authed(t)
	if _, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/m"}); err != nil {
		t.Fatal(err)
	}
	c.Mkdir(ctx, &metapb.MakeRequest{Path: "/m"}) // AlreadyExists
	c.Stat(context.Background(), &metapb.PathRequest{Path: "/"})
	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`sluice_meta_calls_total{code="OK",method="Mkdir"} 1`,
		`sluice_meta_calls_total{code="AlreadyExists",method="Mkdir"} 1`,
		`sluice_meta_calls_total{code="Unauthenticated",method="Stat"} 1`,
		`sluice_meta_raft_state{state="Leader"} 1`,
		`sluice_meta_apply_seconds_count 2`,
		`sluice_meta_raft_applied_index`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestSetattrLinkStatfs: the calls the FUSE adapter needs — attributes,
// hard links, usage, names relative to a directory inode, and namespace
// errors that keep their identity across gRPC.
func TestSetattrLinkStatfs(t *testing.T) {
	c, _ := apiServer(t)
	ctx := authed(t)
	d, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/d", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Create(ctx, &metapb.MakeRequest{At: d.Ino, Path: "f", Mode: 0o644, Uid: 7, Gid: 8})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/d/f"}); err != nil || in.Ino != f.Ino || in.Uid != 7 {
		t.Fatalf("a file made relative to its directory, by path: %v %v", in, err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{At: f.Ino}); err != nil || in.Ino != f.Ino {
		t.Fatalf("stat of an inode by itself: %v %v", in, err)
	}
	mode, uid, size, mtime := uint32(0o4640), uint32(9), uint64(12345), int64(1e18)
	in, err := c.Setattr(ctx, &metapb.SetattrRequest{At: d.Ino, Path: "f", Mode: &mode, Uid: &uid, Size: &size, MtimeNs: &mtime})
	if err != nil || in.Mode != 0o4640 || in.Uid != 9 || in.Gid != 8 || in.Size != 12345 || in.MtimeNs != mtime {
		t.Fatalf("setattr: %v %v", in, err)
	}
	if _, err := c.Setattr(ctx, &metapb.SetattrRequest{Path: "/d", Size: &size}); !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrIsDir) {
		t.Fatalf("truncate of a directory: %v", err)
	}
	in, err = c.Link(ctx, &metapb.LinkRequest{Path: "/d/f", NewAt: RootIno, NewPath: "g"})
	if err != nil || in.Ino != f.Ino || in.Nlink != 2 {
		t.Fatalf("link: %v %v", in, err)
	}
	if _, err := c.Link(ctx, &metapb.LinkRequest{Path: "/d", NewPath: "/e"}); !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrIsDir) {
		t.Fatalf("hard link to a directory: %v", err)
	}
	if _, err := c.Link(ctx, &metapb.LinkRequest{Path: "/d/f", NewPath: "/g"}); !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrExist) {
		t.Fatalf("link over an existing name: %v", err)
	}
	if _, err := c.Unlink(ctx, &metapb.PathRequest{Path: "/d/f"}); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/g"}); err != nil || in.Nlink != 1 || in.Size != 12345 {
		t.Fatalf("the other name after unlink: %v %v", in, err)
	}
	l, err := c.List(ctx, &metapb.ListRequest{At: RootIno, WithInodes: true})
	if err != nil || len(l.Entries) != 2 || len(l.Inodes) != 2 || l.Inodes[1].Ino != f.Ino || l.Inodes[1].Size != 12345 {
		t.Fatalf("list with inodes: %v %v", l, err)
	}
	st, err := c.Statfs(ctx, &metapb.StatfsRequest{})
	if err != nil || st.Inodes != 3 || st.Files != 1 || st.Bytes != 12345 {
		t.Fatalf("statfs: %v %v", st, err)
	}
	errCases := []struct {
		name string
		err  error
		want error
	}{
		{"rmdir non-empty", func() error {
			c.Create(ctx, &metapb.MakeRequest{Path: "/d/x"})
			_, err := c.Rmdir(ctx, &metapb.PathRequest{Path: "/d"})
			return err
		}(), fsmeta.ErrNotEmpty},
		{"long name", func() error {
			_, err := c.Mkdir(ctx, &metapb.MakeRequest{At: d.Ino, Path: strings.Repeat("n", 256)})
			return err
		}(), fsmeta.ErrNameTooLong},
		{"rmdir of a file", func() error { _, err := c.Rmdir(ctx, &metapb.PathRequest{At: d.Ino, Path: "x"}); return err }(), fsmeta.ErrNotDir},
		{"escape upwards", func() error { _, err := c.Stat(ctx, &metapb.PathRequest{At: d.Ino, Path: "../g"}); return err }(), fsmeta.ErrInvalidName},
		{"missing", func() error { _, err := c.Stat(ctx, &metapb.PathRequest{At: d.Ino, Path: "nope"}); return err }(), fsmeta.ErrNotFound},
		{"stale inode", func() error { _, err := c.Stat(ctx, &metapb.PathRequest{At: 999}); return err }(), fsmeta.ErrStale},
		// A name in At itself goes to the log unresolved: the command
		// finds what a read would have.
		{"create in a stale inode", func() error { _, err := c.Create(ctx, &metapb.MakeRequest{At: 999, Path: "n"}); return err }(), fsmeta.ErrStale},
		{"create-open in a file", func() error {
			x, err := c.Stat(ctx, &metapb.PathRequest{Path: "/d/x"})
			if err != nil {
				return err
			}
			_, err = c.Open(ctx, &metapb.OpenRequest{At: x.Ino, Path: "n", Create: true, Write: true, Client: 4, Seq: 1})
			return err
		}(), fsmeta.ErrNotDir},
		{"unlink in a stale inode", func() error { _, err := c.Unlink(ctx, &metapb.PathRequest{At: 999, Path: "n"}); return err }(), fsmeta.ErrStale},
		{"mkdir at the root's name", func() error { _, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/d"}); return err }(), fsmeta.ErrExist},
	}
	for _, tc := range errCases {
		if !errors.Is(fsmeta.ErrorOf(tc.err), tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// TestCloseKeepOpen: fsync sets a file's length and keeps the write
// session (so the collector still leaves the file alone).
func TestCloseKeepOpen(t *testing.T) {
	c, _ := apiServer(t)
	ctx := authed(t)
	if _, err := c.Create(ctx, &metapb.MakeRequest{Path: "/f"}); err != nil {
		t.Fatal(err)
	}
	o, err := c.Open(ctx, &metapb.OpenRequest{Path: "/f", Write: true, Client: 3, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(100)
	if _, err := c.Close(ctx, &metapb.CloseRequest{Ino: o.Inode.Ino, Session: o.Session, Size: &size, KeepOpen: true, Client: 3, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/f"}); err != nil || in.Size != 100 {
		t.Fatalf("length after fsync: %v %v", in, err)
	}
	size = 200
	if _, err := c.Close(ctx, &metapb.CloseRequest{Ino: o.Inode.Ino, Session: o.Session, Size: &size, Client: 3, Seq: 3}); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/f"}); err != nil || in.Size != 200 {
		t.Fatalf("length after close: %v %v", in, err)
	}
}

// TestCreateOpen: Open with create makes the file and its write session
// in one command, which a retry answers the same, and refuses a name that
// exists; the session is a real one (close sets the length and ends it).
func TestCreateOpen(t *testing.T) {
	c, _, _, r := apiServerWithReplica(t)
	ctx := authed(t)
	applied := func() uint64 {
		st, err := c.Status(ctx, &metapb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.AppliedIndex
	}
	if _, err := c.Mkdir(ctx, &metapb.MakeRequest{Path: "/d", Mode: 0o755}); err != nil { // the log settled
		t.Fatal(err)
	}
	req := &metapb.OpenRequest{Path: "/f", Write: true, Create: true, Mode: 0o640, Uid: 7, Gid: 8, Client: 5, Seq: 1}
	before := applied()
	o, err := c.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := applied() - before; got != 1 {
		t.Errorf("create and open took %d commands, want 1", got)
	}
	if o.Session != 1 || o.Inode.Mode != 0o640 || o.Inode.Uid != 7 || o.Inode.Gid != 8 || o.Inode.Type != metapb.InodeType_FILE {
		t.Fatalf("reply %v", o)
	}
	if open, err := r.Namespace().HasSessions(o.Inode.Ino); err != nil || !open {
		t.Fatalf("the new file's write session: %v, %v", open, err)
	}
	if again, err := c.Open(ctx, req); err != nil || again.Inode.Ino != o.Inode.Ino || again.Session != 1 {
		t.Fatalf("a retry: %v, %v; want the first answer", again, err)
	}
	if _, err := c.Open(ctx, &metapb.OpenRequest{Path: "/f", Write: true, Create: true, Client: 5, Seq: 2}); !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrExist) {
		t.Fatalf("creating a name that exists: %v", err)
	}
	if _, err := c.Open(ctx, &metapb.OpenRequest{Path: "/g", Create: true, Client: 5, Seq: 3}); err == nil {
		t.Fatal("create without write was taken")
	}
	size := uint64(42)
	if _, err := c.Close(ctx, &metapb.CloseRequest{Ino: o.Inode.Ino, Session: o.Session, Size: &size, Client: 5, Seq: 4}); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{Path: "/f"}); err != nil || in.Size != 42 {
		t.Fatalf("after close: %v, %v", in, err)
	}
	if open, err := r.Namespace().HasSessions(o.Inode.Ino); err != nil || open {
		t.Fatalf("session after close: %v, %v", open, err)
	}
}

// TestFileTooLarge: a length past fsmeta.MaxFileSize is refused, with the
// namespace's error and OutOfRange, by Setattr and Close, and nothing is
// proposed; the largest length itself is taken.
func TestFileTooLarge(t *testing.T) {
	c, _ := apiServer(t)
	ctx := authed(t)
	f, err := c.Create(ctx, &metapb.MakeRequest{Path: "/f", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	largest, past := uint64(fsmeta.MaxFileSize), uint64(fsmeta.MaxFileSize+1)
	if in, err := c.Setattr(ctx, &metapb.SetattrRequest{At: f.Ino, Size: &largest}); err != nil || in.Size != largest || in.GetWritten() != 0 {
		t.Fatalf("truncate to the largest length: %v, %v (want nothing written)", in, err)
	}
	_, err = c.Setattr(ctx, &metapb.SetattrRequest{At: f.Ino, Size: &past})
	if code(err) != codes.OutOfRange || !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrFileTooLarge) {
		t.Fatalf("truncate past the largest length: %v", err)
	}
	o, err := c.Open(ctx, &metapb.OpenRequest{At: f.Ino, Write: true, Client: 1, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Close(ctx, &metapb.CloseRequest{Ino: f.Ino, Session: o.Session, Client: 1, Seq: 2, Size: &largest, Written: &past}); !errors.Is(fsmeta.ErrorOf(err), fsmeta.ErrFileTooLarge) {
		t.Fatalf("close with a written mark past the largest length: %v", err)
	}
	if in, err := c.Stat(ctx, &metapb.PathRequest{At: f.Ino}); err != nil || in.Size != largest || in.GetWritten() != 0 {
		t.Fatalf("after the refusals: %v, %v", in, err)
	}
}
