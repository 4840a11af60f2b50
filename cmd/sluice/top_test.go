package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTopView: rates and mean latencies come from the difference between
// two scrapes over the time between them; states and chains come from the
// meta replica's scrape; the text view names every target and chain.
func TestTopView(t *testing.T) {
	parse := func(text string) scrape {
		mfs, err := parseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return scrape{families: mfs}
	}
	meta := `# TYPE sluice_mgmtd_target_state gauge
sluice_mgmtd_target_state{node="s1",state="serving",target="1"} 1
sluice_mgmtd_target_state{node="s2",state="syncing",target="2"} 1
# TYPE sluice_mgmtd_chain_version gauge
sluice_mgmtd_chain_version{chain="1"} 7
# TYPE sluice_mgmtd_chain_target_state gauge
sluice_mgmtd_chain_target_state{chain="1",state="serving",target="1"} 1
sluice_mgmtd_chain_target_state{chain="1",state="syncing",target="2"} 1
# TYPE sluice_mgmtd_map_version gauge
sluice_mgmtd_map_version 42
`
	storage := func(reads, bytes, updates, updSum, readCount, readSum float64) string {
		var b strings.Builder
		w := func(format string, args ...any) {
			b.WriteString(strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n")
		}
		w(`# TYPE sluice_storage_reads_total counter`)
		w(`sluice_storage_reads_total{target="1"} %g`, reads)
		w(`# TYPE sluice_storage_read_bytes_total counter`)
		w(`sluice_storage_read_bytes_total{target="1"} %g`, bytes)
		w(`# TYPE sluice_storage_update_seconds histogram`)
		w(`sluice_storage_update_seconds_bucket{target="1",le="+Inf"} %g`, updates)
		w(`sluice_storage_update_seconds_sum{target="1"} %g`, updSum)
		w(`sluice_storage_update_seconds_count{target="1"} %g`, updates)
		w(`# TYPE sluice_storage_read_seconds histogram`)
		w(`sluice_storage_read_seconds_bucket{le="+Inf"} %g`, readCount)
		w(`sluice_storage_read_seconds_sum %g`, readSum)
		w(`sluice_storage_read_seconds_count %g`, readCount)
		w(`# TYPE sluice_storage_resyncs_in_progress gauge`)
		w(`sluice_storage_resyncs_in_progress 1`)
		return b.String()
	}
	t0 := time.Now()
	prev := []scrape{parse(meta), parse(storage(100, 1000, 10, 1, 5, 0.5))}
	cur := []scrape{parse(meta), parse(storage(300, 5000, 30, 3, 15, 0.7))}
	for i := range prev {
		prev[i].at, cur[i].at = t0, t0.Add(2*time.Second)
		prev[i].endpoint, cur[i].endpoint = fmt.Sprint("e", i), fmt.Sprint("e", i)
	}
	v := buildTopView(prev, cur)
	if len(v.Targets) != 2 || v.MapVersion != 42 || len(v.Chains) != 1 || len(v.Chains[0].Members) != 2 {
		t.Fatalf("view: %+v", v)
	}
	t1 := v.Targets[0]
	if t1.ID != 1 || t1.State != "serving" || t1.Node != "s1" || t1.Reads != 100 || t1.ReadBytes != 2000 {
		t.Errorf("target 1: %+v, want 100 reads/s and 2000 B/s serving at s1", t1)
	}
	if d := t1.UpdateLatency - 0.1; d > 1e-9 || d < -1e-9 {
		t.Errorf("target 1 update latency %v, want 0.1 (2 s over 20 updates)", t1.UpdateLatency)
	}
	if d := v.Endpoints[1].ReadLatency - 0.02; d > 1e-9 || d < -1e-9 {
		t.Errorf("storage read latency %v, want 0.02 (0.2 s over 10 reads)", v.Endpoints[1].ReadLatency)
	}
	if v.Targets[1].State != "syncing" || v.Resyncs != 1 {
		t.Errorf("target 2 %q, resyncs %v", v.Targets[1].State, v.Resyncs)
	}
	var out bytes.Buffer
	writeTop(&out, v)
	for _, want := range []string{"map v42", "chain 1 v7: 1:serving 2:syncing", "syncing", "reads 20.00 ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text view lacks %q:\n%s", want, out.String())
		}
	}
}
