package nemesis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sluiceBin is the binary the cluster runs: $SLUICE_BIN, or one built
// by TestMain; binErr says why there is none.
var sluiceBin, binErr = "", error(nil)

func TestMain(m *testing.M) {
	sluiceBin = os.Getenv("SLUICE_BIN")
	if _, err := os.Stat(sluiceBin); sluiceBin != "" && err != nil {
		fmt.Fprintf(os.Stderr, "nemesis: SLUICE_BIN=%s: %v; building one\n", sluiceBin, err)
		sluiceBin = ""
	}
	var tmp string
	if sluiceBin == "" {
		var err error
		if tmp, err = os.MkdirTemp("", "sluice-nemesis-bin-"); err == nil {
			sluiceBin = filepath.Join(tmp, "sluice")
			cmd := exec.Command("go", "build", "-o", sluiceBin, "github.com/sluicefs/sluice/cmd/sluice")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build ./cmd/sluice: %v: %s", err, out)
			}
		} else {
			binErr = err
		}
	}
	code := m.Run()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

// envOr is the environment variable name, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestNemesis runs the cluster under faults for each seed. The default is
// the short run of `make test`: three seeds of 15 s of faults. `make
// chaos` sets NEMESIS_SEEDS, NEMESIS_DURATION, NEMESIS_SCENARIO (mixed;
// none, the workload without faults; or a comma-separated list of fault
// kinds), NEMESIS_CLIENTS; NEMESIS_SNAPSHOT_EVERY sets the meta replicas'
// snapshot_every (default 64; -1: the server's own default).
//
// A failed seed keeps its directory (history.jsonl, report.txt,
// final-map.json, every process's log) and names it; a passing one is
// removed.
func TestNemesis(t *testing.T) {
	if binErr != nil {
		t.Skipf("nemesis: no sluice binary: %v", binErr)
	}
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skipf("nemesis: no /dev: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Logf("nemesis: not root: the partition and disk-full faults will be skipped (each run says so)")
	}
	duration, err := time.ParseDuration(envOr("NEMESIS_DURATION", "15s"))
	if err != nil {
		t.Fatalf("NEMESIS_DURATION: %v", err)
	}
	scenario := envOr("NEMESIS_SCENARIO", "mixed")
	var faults []string // nil: every kind
	switch scenario {
	case "mixed":
	case "none": // the workload alone: the harness's own check
		faults = []string{}
	default:
		faults = strings.Split(scenario, ",")
	}
	clients, err := strconv.Atoi(envOr("NEMESIS_CLIENTS", "3"))
	if err != nil {
		t.Fatalf("NEMESIS_CLIENTS: %v", err)
	}
	snapshotEvery, err := strconv.Atoi(envOr("NEMESIS_SNAPSHOT_EVERY", "0"))
	if err != nil {
		t.Fatalf("NEMESIS_SNAPSHOT_EVERY: %v", err)
	}
	var summaries []string
	for _, s := range strings.Fields(envOr("NEMESIS_SEEDS", "1 2 3")) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NEMESIS_SEEDS: %v", err)
		}
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			dir, err := os.MkdirTemp("", fmt.Sprintf("sluice-nemesis-seed-%d-", seed))
			if err != nil {
				t.Fatal(err)
			}
			// Run must end before `go test -timeout` does: a test killed by
			// its timeout runs no cleanup.
			deadline := time.Now().Add(duration + 8*time.Minute)
			if d, ok := t.Deadline(); ok && d.Add(-time.Minute).Before(deadline) {
				deadline = d.Add(-time.Minute)
			}
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			logf, err := os.Create(filepath.Join(dir, "nemesis.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			rep, err := Run(ctx, Config{Bin: sluiceBin, Dir: dir, Seed: seed, Scenario: scenario, Faults: faults, Duration: duration,
				Workload: WorkloadConfig{Clients: clients}, Cluster: ClusterConfig{SnapshotEvery: snapshotEvery},
				Logger: slog.New(slog.NewTextHandler(logf, nil))})
			summaries = append(summaries, rep.Summary())
			t.Log(rep.Summary())
			failed := rep.Failed()
			if err != nil {
				failed = append([]string{"run: " + err.Error()}, failed...)
			}
			if len(failed) == 0 {
				os.RemoveAll(dir)
				return
			}
			for _, f := range failed {
				t.Error(f)
			}
			for _, v := range rep.Verdict.GetVisualizations() {
				t.Logf("porcupine: %s", v)
			}
			t.Errorf("nemesis seed %d failed; its directory is kept: %s (history.jsonl, report.txt, final-map.json, *.log); rerun: NEMESIS_SEEDS=%d NEMESIS_DURATION=%v NEMESIS_SCENARIO=%s go test -run 'TestNemesis$' -v ./internal/nemesis/",
				seed, dir, seed, duration, scenario)
		})
	}
	for _, s := range summaries {
		t.Log(s)
	}
}
