package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
)

// get fetches url with the token (none when empty) and a short timeout.
func get(url, token string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// scrapeOK scrapes addr's /metrics and parses it with the Prometheus text
// parser.
func scrapeOK(t *testing.T, addr, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, err := get("http://"+addr+"/metrics", token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", addr, code, err)
	}
	mfs, err := parseMetrics(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return mfs
}

// sumOf sums a counter or gauge family's series.
func sumOf(mfs map[string]*dto.MetricFamily, name string) float64 {
	sum := 0.0
	for _, m := range mfs[name].GetMetric() {
		sum += value(m)
	}
	return sum
}

// TestMonitoring runs `sluice server` as one meta and three storage
// processes and `sluice dev`, each with --http, and checks what they serve:
// /metrics parses and has each role's metrics; a read through the SDK moves
// the storage nodes' read byte counters by exactly the bytes read (and the
// client's own counter too); a storage node's /readyz fails while its
// target is offline and passes once it is serving again; the REST API
// answers a status call with the token and refuses one without;
// --http-guard guards /metrics; and `sluice top --once --json` names every
// target.
func TestMonitoring(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	dir := t.TempDir()
	addr := testproc.FreeAddr(t)
	metaHTTP := testproc.FreeAddr(t)
	tokenFile := filepath.Join(dir, "token")
	writeJSON(t, filepath.Join(dir, "meta.json"), map[string]any{"dir": filepath.Join(dir, "m"), "token_file": tokenFile, "http": metaHTTP,
		"meta": map[string]any{"listen": addr, "expect_targets": 3, "replicas": 3, "stripe": 3, "chunk_size": 1 << 20}})
	metaProc := startChild(t, "meta serving", "server", "--role", "meta", "--config", filepath.Join(dir, "meta.json"), "--log-format", "json")
	storageHTTP := map[int]string{}
	procs := map[int]*os.Process{}
	for i := 1; i <= 3; i++ {
		storageHTTP[i] = testproc.FreeAddr(t)
		cfg := filepath.Join(dir, fmt.Sprintf("s%d.json", i))
		writeJSON(t, cfg, map[string]any{"dir": filepath.Join(dir, fmt.Sprint("s", i)), "token_file": tokenFile,
			"storage": map[string]any{"cluster": addr, "node_id": fmt.Sprint("s", i), "targets": []int{i}}})
		args := []string{"server", "--role", "storage", "--config", cfg, "--http", storageHTTP[i]}
		if i == 2 {
			args = append(args, "--http-guard")
		}
		procs[i] = startProc(t, "storage node", args...).Process
	}
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ready := func(i int) bool {
		code, _, err := get("http://"+storageHTTP[i]+"/readyz", token)
		return err == nil && code == http.StatusOK
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 1; i <= 3; i++ {
		waitFor(fmt.Sprintf("storage %d ready", i), func() bool { return ready(i) })
	}
	if code, body, err := get("http://"+metaHTTP+"/readyz", ""); err != nil || code != http.StatusOK {
		t.Fatalf("meta /readyz: %d %s %v", code, body, err)
	}

	// The meta process logs JSON, and Raft's warnings reach it (a new
	// group's first election starts with one).
	raftWarned := false
	for _, line := range strings.Split(metaProc.Stderr(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(rec["component"]), "raft") {
			raftWarned = true
		}
	}
	if !raftWarned {
		t.Errorf("no Raft warning as JSON in the meta process's log:\n%s", metaProc.Stderr())
	}

	// Each role's metrics, parsed.
	meta := scrapeOK(t, metaHTTP, "")
	for _, name := range []string{"sluice_meta_raft_state", "sluice_mgmtd_map_version", "sluice_mgmtd_target_state", "sluice_mgmtd_chain_target_state", "go_goroutines"} {
		if meta[name] == nil {
			t.Errorf("meta /metrics has no %s", name)
		}
	}
	if n := len(meta["sluice_mgmtd_target_state"].GetMetric()); n != 3 {
		t.Errorf("meta reports %d target states, want 3", n)
	}
	for _, name := range []string{"sluice_storage_reads_total", "sluice_storage_read_bytes_total", "sluice_storage_chunks", "sluice_storage_disk_free_bytes", "sluice_storage_resyncs_in_progress"} {
		if scrapeOK(t, storageHTTP[1], "")[name] == nil {
			t.Errorf("storage /metrics has no %s", name)
		}
	}
	// --http-guard: storage 2 serves /metrics and /readyz with the token only.
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		if code, _, _ := get("http://"+storageHTTP[2]+path, ""); code != http.StatusUnauthorized {
			t.Errorf("guarded %s without the token: %d, want 401", path, code)
		}
	}

	// A read moves the storage read byte counters by the bytes read.
	data := fabrictest.RandBytes(7, 3<<20+12345)
	if err := cl.WriteFile(ctx, "/m", data); err != nil {
		t.Fatal(err)
	}
	readBytes := func() float64 {
		sum := 0.0
		for i := 1; i <= 3; i++ {
			sum += sumOf(scrapeOK(t, storageHTTP[i], token), "sluice_storage_read_bytes_total")
		}
		return sum
	}
	before := readBytes()
	clientBefore, _ := cl.Metrics().Snapshot()
	f, err := cl.Open(ctx, "/m")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(got, 0); n != len(data) || (err != nil && err != io.EOF) || !bytes.Equal(got, data) {
		t.Fatalf("read %d of %d bytes: %v", n, len(data), err)
	}
	f.Close()
	if d := readBytes() - before; d != float64(len(data)) {
		t.Errorf("storage read bytes moved by %.0f for a read of %d bytes", d, len(data))
	}
	clientAfter, _ := cl.Metrics().Snapshot()
	if d := clientAfter["sluice_client_read_bytes_total"] - clientBefore["sluice_client_read_bytes_total"]; d != float64(len(data)) {
		t.Errorf("client read bytes moved by %.0f for a read of %d bytes", d, len(data))
	}

	// REST: the status call with the token, and without it.
	code, body, err := get("http://"+metaHTTP+"/v1/cluster/status", token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("REST status with the token: %d %s %v", code, body, err)
	}
	var status struct {
		Leader, State string
	}
	if err := json.Unmarshal(body, &status); err != nil || status.Leader == "" || status.State != "Leader" {
		t.Fatalf("REST status: %v: %s", err, body)
	}
	if code, body, _ := get("http://"+metaHTTP+"/v1/cluster/status", ""); code != http.StatusUnauthorized {
		t.Errorf("REST status without the token: %d %s, want 401", code, body)
	}
	if code, _, _ := get("http://"+metaHTTP+"/v1/cluster/status", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("REST status with a wrong token: %d, want 401", code)
	}
	code, body, _ = get("http://"+metaHTTP+"/openapi.json", "")
	var doc struct{ Paths map[string]any }
	if code != http.StatusOK || json.Unmarshal(body, &doc) != nil || doc.Paths["/v1/cluster/status"] == nil {
		t.Errorf("/openapi.json: %d, no /v1/cluster/status in %d paths", code, len(doc.Paths))
	}

	// sluice top --once --json names every target.
	out, err := run(t, "top", "--once", "--json", "--interval", "200ms", "--token", token, metaHTTP, storageHTTP[1], storageHTTP[2], storageHTTP[3])
	if err != nil {
		t.Fatal(err)
	}
	var view topView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("top --json: %v\n%s", err, out)
	}
	seen := map[uint32]string{}
	for _, tg := range view.Targets {
		seen[tg.ID] = tg.State
	}
	for id := uint32(1); id <= 3; id++ {
		if seen[id] != "serving" {
			t.Errorf("top names target %d as %q; view: %s", id, seen[id], out)
		}
	}
	if len(view.Chains) != 3 {
		t.Errorf("top shows %d chains, want 3", len(view.Chains))
	}

	// /readyz of storage 3 fails while its target is offline (the process
	// stopped past its lease) and passes once it serves again.
	procs[3].Signal(syscall.SIGSTOP)
	offline := func() bool {
		st, err := cl.ClusterStatus(ctx)
		if err != nil {
			return false
		}
		for _, tg := range st.Targets {
			if tg.ID == 3 {
				return tg.State == "offline"
			}
		}
		return false
	}
	waitFor("target 3 offline", offline)
	if ready(3) {
		t.Error("storage 3 /readyz passes while its target is offline")
	}
	procs[3].Signal(syscall.SIGCONT)
	waitFor("storage 3 ready after it rejoined", func() bool { return ready(3) })
	if offline() {
		t.Error("storage 3 /readyz passes while mgmtd has its target offline")
	}

	// sluice dev serves the same, for the whole cluster in one process.
	devHTTP := testproc.FreeAddr(t)
	startProc(t, "export SLUICE_CLUSTER", "dev", "--dir", filepath.Join(dir, "dev"), "--listen", testproc.FreeAddr(t), "--http", devHTTP, "--agent-socket", "")
	waitFor("dev ready", func() bool {
		code, _, err := get("http://"+devHTTP+"/readyz", "")
		return err == nil && code == http.StatusOK
	})
	dev := scrapeOK(t, devHTTP, "")
	for _, name := range []string{"sluice_storage_chunks", "sluice_storage_read_seconds", "sluice_storage_resyncs_in_progress"} {
		if n := len(dev[name].GetMetric()); n != 3 {
			t.Errorf("dev reports %s of %d nodes, want 3", name, n)
		}
	}
	if dev["sluice_mgmtd_map_version"] == nil {
		t.Error("dev /metrics has no sluice_mgmtd_map_version")
	}
	if code, _, _ := get("http://"+devHTTP+"/v1/cluster/status", ""); code != http.StatusUnauthorized {
		t.Errorf("dev REST status without the token: %d, want 401", code)
	}

	// The Grafana dashboard asks only for metrics some process serves.
	served := map[string]bool{}
	for _, mfs := range []map[string]*dto.MetricFamily{meta, dev, scrapeOK(t, storageHTTP[1], ""), scrapeOK(t, storageHTTP[3], "")} {
		for name := range mfs {
			served[name] = true
		}
	}
	snap, _ := cl.Metrics().Snapshot()
	for name := range snap {
		served[strings.Split(name, "{")[0]] = true
	}
	board, err := os.ReadFile("../../deploy/grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	asked := regexp.MustCompile(`sluice_[a-z_]+`).FindAllString(string(board), -1)
	if len(asked) < 20 {
		t.Fatalf("the dashboard asks for %d metrics", len(asked))
	}
	for _, name := range asked {
		base := strings.TrimSuffix(name, "_bucket")
		if !served[name] && !served[base] {
			t.Errorf("the dashboard asks for %s, which no process serves", name)
		}
	}
}
