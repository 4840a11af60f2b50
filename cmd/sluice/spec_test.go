package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
)

// TestSpecParseStrict: a key the spec does not know, at the top or inside
// a node, is an error naming the key and its line; JSON reads as YAML does.
func TestSpecParseStrict(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"token_file: /t\nreplica: 3\n", `line 2: unknown key "replica"`},
		{"meta:\n  - name: m1\n    adress: 1.2.3.4:5\n", `line 3: unknown key "adress"`},
		{"storage:\n  - name: s1\n    targets: [1]\n    disk: /x\n", `line 4: unknown key "disk"`},
		{"{\"token_file\": \"/t\",\n\t\"chunksize\": 1}\n", `line 2: unknown key "chunksize"`},
		{"replicas: three\n", "cannot unmarshal"},
	} {
		_, err := parseSpec([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	y, err := parseSpec([]byte("token_file: /t\nreplicas: 2\nstorage:\n  - {name: s1, address: \"h:1\", rack: r1, targets: [1, 2]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := parseSpec([]byte(`{"token_file": "/t", "replicas": 2, "storage": [{"name": "s1", "address": "h:1", "rack": "r1", "targets": [1, 2]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y, j) || y.replicas() != 2 || len(y.Storage) != 1 || y.Storage[0].Rack != "r1" {
		t.Errorf("YAML %+v, JSON %+v", y, j)
	}
}

// TestSpecServerConfig: the example spec's nodes become exactly the
// per-process configs an operator would write by hand (README's).
func TestSpecServerConfig(t *testing.T) {
	s, err := loadSpec(filepath.Join("..", "..", "deploy", "cluster.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ node, role, config string }{
		{"m2", "meta", `{"dir": "/srv/sluice", "token_file": "/etc/sluice/token", "http": "10.0.0.2:7480",
		 "meta": {"id": "m2", "raft_bind": "10.0.0.2:7401", "listen": "10.0.0.2:7400",
		          "members": {"m1": "10.0.0.1:7401", "m2": "10.0.0.2:7401", "m3": "10.0.0.3:7401"},
		          "chunk_size": 1048576, "stripe": 8, "expect_targets": 12, "replicas": 3, "collect_delay": "1m",
		          "max_moves": 4, "max_moves_per_target": 1, "snapshot_every": 8192, "inline_max": 4096}}`},
		{"s4", "storage", `{"dir": "/data/sluice", "token_file": "/etc/sluice/token", "http": "10.0.0.8:7480",
		 "storage": {"cluster": "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400", "node_id": "s4",
		             "rack": "r3", "fabric_listen": "10.0.0.8:7410", "targets": [10, 11, 12], "chunk_size": 1048576, "drop_left": "10m"}}`},
	} {
		var want serverConfig
		if err := json.Unmarshal([]byte(tc.config), &want); err != nil {
			t.Fatal(err)
		}
		got, role, err := s.serverConfig(tc.node)
		if err != nil || role != tc.role || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s %+v (%v), want %s %+v", tc.node, role, got, err, tc.role, want)
		}
	}
	// One replica: no members (it bootstraps alone), stripe and replicas
	// default from the targets, chunk size 1 MiB, http_guard carried.
	one, err := parseSpec([]byte("token_file: /t\ndir: /d\nhttp_guard: true\nmeta: [{name: m, address: \"h:1\"}]\n" +
		"storage: [{name: a, address: \"h:2\", targets: [1]}, {name: b, address: \"h:3\", targets: [2]}, {name: c, address: \"h:4\", targets: [3, 4]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := one.serverConfig("m")
	var want serverConfig
	want.Dir, want.TokenFile, want.HTTPGuard = "/d", "/t", true
	want.Meta.ID, want.Meta.Listen, want.Meta.ChunkSize, want.Meta.Stripe, want.Meta.ExpectTargets, want.Meta.Replicas = "m", "h:1", 1<<20, 4, 4, 3
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("one replica: %+v (%v), want %+v", got, err, want)
	}
	if _, _, err := one.serverConfig("nobody"); err == nil || err.Error() != `no node "nobody" in the spec` {
		t.Errorf("unknown node: %v", err)
	}
	one.Storage[0].Address = ""
	if _, _, err := one.serverConfig("m"); err == nil || !strings.Contains(err.Error(), "storage a: no address") {
		t.Errorf("a spec with a problem: %v", err)
	}
}

// validSpec is a spec with no problems and a readable token file.
func validSpec(t *testing.T) *clusterSpec {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &clusterSpec{TokenFile: tok, Dir: "/srv",
		Meta: []metaSpec{{Name: "m1", Address: "10.0.0.1:7400", RaftAddress: "10.0.0.1:7401"}, {Name: "m2", Address: "10.0.0.2:7400", RaftAddress: "10.0.0.2:7401"}},
		Storage: []storageSpec{{Name: "s1", Address: "10.0.0.5:7410", Rack: "r1", Targets: []uint32{1, 2}},
			{Name: "s2", Address: "10.0.0.6:7410", Rack: "r2", Targets: []uint32{3}}, {Name: "s3", Address: "10.0.0.7:7410", Targets: []uint32{4}}}}
}

// TestSpecProblems: each check, alone, is exactly one line.
func TestSpecProblems(t *testing.T) {
	if ps := validSpec(t).problems(true); len(ps) != 0 {
		t.Fatalf("a valid spec: %q", ps)
	}
	intp := func(n int) *int { return &n }
	for _, tc := range []struct {
		name   string
		change func(s *clusterSpec)
		want   string
	}{
		{"no meta", func(s *clusterSpec) { s.Meta = nil }, "no meta replicas"},
		{"no storage", func(s *clusterSpec) { s.Storage = nil }, "no storage nodes"},
		{"replicas 0", func(s *clusterSpec) { s.Replicas = intp(0) }, "replicas 0: want 1 or more"},
		{"replicas negative", func(s *clusterSpec) { s.Replicas = intp(-2) }, "replicas -2: want 1 or more"},
		{"chunk not a power of two", func(s *clusterSpec) { s.ChunkSize = 3 << 20 }, "chunk_size 3145728: want a power of two from 65536 (64 KiB) to 67108864 (64 MiB)"},
		{"chunk too small", func(s *clusterSpec) { s.ChunkSize = 4096 }, "chunk_size 4096: want a power of two from 65536 (64 KiB) to 67108864 (64 MiB)"},
		{"chunk too big", func(s *clusterSpec) { s.ChunkSize = 128 << 20 }, "chunk_size 134217728: want a power of two from 65536 (64 KiB) to 67108864 (64 MiB)"},
		{"stripe negative", func(s *clusterSpec) { s.Stripe = -1 }, "stripe -1: want 1 or more"},
		{"collect delay", func(s *clusterSpec) { s.CollectDelay = "soon" }, `collect_delay "soon": want a positive duration such as "1m"`},
		{"drop left", func(s *clusterSpec) { s.DropLeft = "-1s" }, `drop_left "-1s": want a positive duration such as "10m"`},
		{"no token file", func(s *clusterSpec) { s.TokenFile = "" }, "no token_file"},
		{"token file missing", func(s *clusterSpec) { s.TokenFile = "/nonexistent/token" }, "token_file /nonexistent/token: no such file or directory"},
		{"token file a directory", func(s *clusterSpec) { s.TokenFile = filepath.Dir(s.TokenFile) }, "token_file TOKEN: is a directory"},
		{"token file empty", func(s *clusterSpec) { os.WriteFile(s.TokenFile, []byte(" \n"), 0o600) }, "token_file TOKEN: empty"},
		{"no name", func(s *clusterSpec) { s.Storage[1].Name = "" }, "storage[1]: no name"},
		{"duplicate name", func(s *clusterSpec) { s.Meta[1].Name = "m1" }, "meta m1: name already used by meta m1"},
		{"duplicate name across roles", func(s *clusterSpec) { s.Storage[0].Name = "m2" }, "storage m2: name already used by meta m2"},
		{"no meta address", func(s *clusterSpec) { s.Meta[0].Address = "" }, "meta m1: no address"},
		{"no raft address", func(s *clusterSpec) { s.Meta[1].RaftAddress = "" }, "meta m2: no raft_address"},
		{"no storage address", func(s *clusterSpec) { s.Storage[2].Address = "" }, "storage s3: no address"},
		{"address without port", func(s *clusterSpec) { s.Meta[0].Address = "10.0.0.1" }, `meta m1: address "10.0.0.1": want host:port`},
		{"address bad port", func(s *clusterSpec) { s.Storage[0].Address = "h:99999" }, `storage s1: address "h:99999": port "99999" is not a number from 0 to 65535`},
		{"bad http", func(s *clusterSpec) { s.Storage[0].HTTP = "h" }, `storage s1: http "h": want host:port`},
		{"duplicate address", func(s *clusterSpec) { s.Meta[1].RaftAddress = "10.0.0.1:7400" }, "meta m2: raft_address 10.0.0.1:7400 already used by meta m1 address"},
		{"duplicate address across roles", func(s *clusterSpec) { s.Storage[1].HTTP = "10.0.0.2:7401" }, "storage s2: http 10.0.0.2:7401 already used by meta m2 raft_address"},
		{"no dir", func(s *clusterSpec) {
			s.Dir, s.Meta[0].Dir, s.Meta[1].Dir = "", "/a", "/b"
			s.Storage[0].Dir, s.Storage[1].Dir = "/c", "/d"
		}, "storage s3: no dir (and no dir for the cluster)"},
		{"no targets", func(s *clusterSpec) { s.Storage[2].Targets = nil }, "storage s3: no targets"},
		{"target 0", func(s *clusterSpec) { s.Storage[2].Targets = []uint32{0} }, "storage s3: target 0: target ids start at 1"},
		{"duplicate target", func(s *clusterSpec) { s.Storage[2].Targets = []uint32{2} }, "storage s3: target 2 already on storage s1"},
		{"too few racks", func(s *clusterSpec) { s.Storage[2].Rack = "r1" }, "replicas 3: only 2 failure domains (distinct racks; a node without a rack counts alone), want 3 or more"},
		{"too few nodes", func(s *clusterSpec) { s.Replicas = intp(4) }, "replicas 4: only 3 failure domains (distinct racks; a node without a rack counts alone), want 4 or more"},
	} {
		s := validSpec(t)
		tc.change(s)
		want := strings.NewReplacer("TOKEN", s.TokenFile).Replace(tc.want)
		if ps := s.problems(true); len(ps) != 1 || ps[0] != want {
			t.Errorf("%s: %q, want %q", tc.name, ps, want)
		}
	}
	// Without files (what sluice server checks), a missing token file is no
	// problem: a meta replica makes it.
	s := validSpec(t)
	s.TokenFile = "/nonexistent/token"
	if ps := s.problems(false); len(ps) != 0 {
		t.Errorf("without files: %q", ps)
	}
	// Several problems: one line each, in the spec's order.
	s.Meta[0].Address, s.Storage[0].Targets = "", nil
	if ps := s.problems(true); len(ps) != 3 || ps[1] != "meta m1: no address" || ps[2] != "storage s1: no targets" {
		t.Errorf("several: %q", ps)
	}
}

// TestClusterCheck: `sluice cluster check` prints ok with the counts, or
// one line per problem and fails.
func TestClusterCheck(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("secret"), 0o600)
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("token_file: "+tok+"\nreplicas: 2\ndir: /d\nmeta: [{name: m, address: \"h:1\"}]\n"+
		"storage: [{name: a, address: \"h:2\", targets: [1, 2]}, {name: b, address: \"h:3\", targets: [3]}]\n"), 0o600)
	out, err := run(t, "cluster", "check", "--spec", good)
	if err != nil || out != "ok: 1 meta, 2 storage nodes, 3 targets\n" {
		t.Errorf("good spec: %q (%v)", out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("token_file: "+dir+"/none\ndir: /d\nmeta: [{name: m, address: \"h:1\"}, {name: m, address: \"h:1\"}]\nstorage: []\n"), 0o600)
	out, err = run(t, "cluster", "check", "--spec", bad)
	want := "no storage nodes\ntoken_file " + dir + "/none: no such file or directory\nmeta m: no raft_address\nmeta m: name already used by meta m\n" +
		"meta m: address h:1 already used by meta m address\nmeta m: no raft_address\n"
	if err == nil || err.Error() != "spec "+bad+": 6 problem(s)" || out != want {
		t.Errorf("bad spec: %q (%v), want %q", out, err, want)
	}
	os.WriteFile(bad, []byte("meta: [{name: m, addr: \"h:1\"}]\n"), 0o600)
	if _, err := run(t, "cluster", "check", "--spec", bad); err == nil || err.Error() != "spec "+bad+`: line 1: unknown key "addr"` {
		t.Errorf("unknown key: %v", err)
	}
}

// TestServerFlags: `sluice server` wants a spec and a node, or a role and
// a config, and a --role that is not the node's is refused.
func TestServerFlags(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	os.WriteFile(spec, []byte("token_file: /t\nreplicas: 1\ndir: /d\nmeta: [{name: m, address: \"h:1\"}]\nstorage: [{name: a, address: \"h:2\", targets: [1]}]\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want --spec FILE --node NAME, or --role meta|storage --config FILE"},
		{[]string{"--config", spec}, "--config needs --role meta|storage"},
		{[]string{"--spec", spec}, "if any flags in the group [spec node] are set they must all be set"},
		{[]string{"--spec", spec, "--node", "a", "--role", "meta"}, "spec " + spec + ": node a is a storage node, not meta"},
		{[]string{"--spec", spec, "--node", "z"}, "spec " + spec + `: no node "z" in the spec`},
	} {
		_, err := run(t, append([]string{"server"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestClusterFromSpec: one meta replica and three storage nodes in three
// racks, each a `sluice server --spec FILE --node NAME` process from the
// one spec, take a file with `sluice cp` and give it back.
func TestClusterFromSpec(t *testing.T) {
	dir := t.TempDir()
	meta := testproc.FreeAddr(t)
	spec := fmt.Sprintf("token_file: %s/token\nreplicas: 3\nchunk_size: 1048576\ndir: %s/default\n"+
		"meta:\n  - {name: m1, address: %q, raft_address: %q, dir: %s/m1}\nstorage:\n", dir, dir, meta, testproc.FreeAddr(t), dir)
	for i := 1; i <= 3; i++ {
		spec += fmt.Sprintf("  - {name: s%d, address: %q, rack: r%d, dir: %s/s%d, targets: [%d]}\n", i, testproc.FreeAddr(t), i, dir, i, i)
	}
	specFile := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(specFile, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	startProc(t, "meta serving", "server", "--spec", specFile, "--node", "m1")
	for i := 1; i <= 3; i++ {
		startProc(t, "storage node s"+fmt.Sprint(i), "server", "--spec", specFile, "--node", fmt.Sprint("s", i))
	}
	if out, err := run(t, "cluster", "check", "--spec", specFile); err != nil || out != "ok: 1 meta, 3 storage nodes, 3 targets\n" {
		t.Errorf("check of the running cluster's spec: %q (%v)", out, err)
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_CLUSTER", meta)
	t.Setenv("SLUICE_TOKEN", strings.TrimSpace(string(token)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := sdk.Connect(ctx, sdk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		st, err := cl.ClusterStatus(ctx)
		if err == nil && len(st.Chains) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no chain table: %+v (%v)", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "cp", in, "sluice:/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "cp", "sluice:/f", out); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != string(data) {
		t.Fatalf("read back %d bytes of %d (%v)", len(got), len(data), err)
	}
	for i := 1; i <= 3; i++ { // each node kept its target in its own dir
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprint("s", i), fmt.Sprint("target-", i))); err != nil {
			t.Errorf("storage s%d: %v", i, err)
		}
	}
}
