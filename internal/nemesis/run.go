package nemesis

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Config is one run. Zero fields take the defaults in brackets.
type Config struct {
	Bin      string // the sluice binary
	Dir      string // the run's directory (must exist)
	Seed     uint64
	Scenario string   // a name for the fault mix [mixed]
	Faults   []string // kinds to draw from [AllFaults]; empty, not nil: none

	Duration time.Duration // of faults [20 s]
	// RecoverWithin bounds the wait, after every fault is healed, for
	// every target to serve again [60 s].
	RecoverWithin time.Duration
	Workload      WorkloadConfig // Cluster, Token and Seed are filled in
	Cluster       ClusterConfig  // Bin, Dir, Tmpfs and Event are filled in
	Logger        *slog.Logger   // the harness's own progress [discard]
}

// Report is a run's outcome.
type Report struct {
	Seed     uint64
	Scenario string
	Dir      string
	Faults   map[string]int // injected, by kind
	Skipped  []string       // kinds that could not run here, with why
	Verdict  *Verdict
	// Recovered: within RecoverWithin of the last heal every process was
	// up and the map showed every target serving, unchanged for Settle;
	// RecoverTime is when that settled stretch began.
	Recovered   bool
	RecoverTime time.Duration
	// Replicas lists differences between replicas found offline.
	Replicas []string
	// Errors of the run itself (setup, stop), and processes that exited
	// on their own.
	Errors []string
	Exits  []string
	// ErrorKinds counts the errors failed ops returned, by message with
	// the numbers taken out.
	ErrorKinds map[string]int
	Elapsed    time.Duration
}

// Failed lists why the run failed; empty means it passed.
func (r *Report) Failed() []string {
	var out []string
	out = append(out, r.Errors...)
	if !r.Recovered {
		out = append(out, "the cluster did not recover: not every target serving")
	}
	if r.Verdict != nil {
		out = append(out, r.Verdict.Problems()...)
	} else {
		out = append(out, "no history checked")
	}
	for _, p := range r.Replicas {
		out = append(out, "replicas: "+p)
	}
	for _, e := range r.Exits {
		out = append(out, "process exited on its own: "+e)
	}
	for k, n := range r.ErrorKinds {
		if strings.Contains(k, "unknown method") {
			out = append(out, fmt.Sprintf("%d ops failed with %q: a node served before its methods were registered", n, k))
		}
	}
	return out
}

// Summary is the run in one line.
func (r *Report) Summary() string {
	kinds := make([]string, 0, len(r.Faults))
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	v := r.Verdict
	if v == nil {
		v = &Verdict{}
	}
	lin := "yes"
	switch {
	case r.Verdict == nil:
		lin = "unchecked"
	case !v.Linearizable:
		lin = fmt.Sprintf("NO (keys %v)", v.NonLinearizable)
	case len(v.Unknown) > 0:
		lin = fmt.Sprintf("yes (%d keys unknown: checker timed out)", len(v.Unknown))
	}
	result := "PASS"
	if len(r.Failed()) > 0 {
		result = "FAIL"
	}
	rec := fmt.Sprintf("%.1fs", r.RecoverTime.Seconds())
	if !r.Recovered {
		rec = "never (" + rec + ")"
	}
	skipped := ""
	if len(r.Skipped) > 0 {
		skipped = fmt.Sprintf(" skipped=[%s]", strings.Join(r.Skipped, "; "))
	}
	return fmt.Sprintf("nemesis %s seed=%d scenario=%s faults=[%s]%s ops=%d acked-writes=%d indeterminate-writes=%d reads=%d failed-reads=%d acked-writes-lost=%d corrupt-reads=%d linearizable=%s recover=%s replica-diffs=%d elapsed=%s",
		result, r.Seed, r.Scenario, strings.Join(kinds, " "), skipped, v.Ops, v.AckedWrites, v.InfoWrites, v.Reads, v.FailedReads, v.LostWrites,
		len(v.Corrupt), lin, rec, len(r.Replicas), r.Elapsed.Round(time.Second))
}

// Run runs one seed: the cluster, the workload under faults, the heal,
// the recovery, the final reads, the stop and the checks. The report
// says what was found; the error is for a run that could not be carried
// out at all. Everything of the run is written under cfg.Dir:
// history.jsonl, report.txt, final-map.json and each process's log.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	start := time.Now()
	if cfg.Scenario == "" {
		cfg.Scenario = "mixed"
	}
	if cfg.Faults == nil {
		cfg.Faults = AllFaults
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.RecoverWithin <= 0 {
		cfg.RecoverWithin = 60 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep = &Report{Seed: cfg.Seed, Scenario: cfg.Scenario, Dir: cfg.Dir, Faults: map[string]int{}, ErrorKinds: map[string]int{}}
	h := NewHistory()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973))
	defer func() {
		rep.Elapsed = time.Since(start)
		if werr := h.WriteJSONLines(filepath.Join(cfg.Dir, "history.jsonl")); werr != nil {
			rep.Errors = append(rep.Errors, werr.Error())
		}
		text := rep.Summary() + "\n" + strings.Join(rep.Failed(), "\n") + "\n"
		os.WriteFile(filepath.Join(cfg.Dir, "report.txt"), []byte(text), 0o644)
	}()
	var exitMu sync.Mutex
	event := func(kind, fault, format string, args ...any) {
		e := h.Event(kind, fault, format, args...)
		log.Info("nemesis: "+e.Kind, "fault", e.Fault, "detail", e.Detail, "at", time.Duration(e.Time).Round(time.Millisecond))
		if kind == "exit" { // from a process's waiter: guarded
			exitMu.Lock()
			rep.Exits = append(rep.Exits, e.Detail)
			exitMu.Unlock()
		}
	}

	// What this machine allows.
	wantKinds := map[string]bool{}
	for _, k := range cfg.Faults {
		wantKinds[k] = true
	}
	var fw *Firewall
	if wantKinds[Partition] {
		if fw, err = NewFirewall(); err != nil {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", Partition, err))
			event("skip", Partition, "partitions cannot run here: %v", err)
			fw = nil
		} else {
			defer func() {
				if cerr := fw.Close(); cerr != nil {
					rep.Errors = append(rep.Errors, cerr.Error())
				}
			}()
		}
	}
	cc := cfg.Cluster
	cc.Bin, cc.Dir, cc.Logger = cfg.Bin, cfg.Dir, log
	cc.Event = func(kind, fault, format string, args ...any) { event(kind, fault, format, args...) }
	nodes := cc.Nodes
	if nodes <= 0 {
		nodes = 4
	}
	if wantKinds[DiskFull] {
		if os.Geteuid() != 0 {
			rep.Skipped = append(rep.Skipped, DiskFull+": not root (a tmpfs needs mount)")
			event("skip", DiskFull, "disk-full cannot run here: not root, no tmpfs")
		} else {
			cc.Tmpfs = []uint32{uint32(1 + rng.IntN(nodes))}
		}
	}
	c, err := StartCluster(ctx, cc)
	if err != nil {
		if len(cc.Tmpfs) > 0 && strings.Contains(err.Error(), "mount") {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", DiskFull, err))
			event("skip", DiskFull, "disk-full cannot run here: %v", err)
			cc.Tmpfs = nil
			c, err = StartCluster(ctx, cc)
		}
		if err != nil {
			return rep, err
		}
	}
	defer func() {
		if cerr := c.Close(); cerr != nil {
			rep.Errors = append(rep.Errors, cerr.Error())
		}
	}()
	event("phase", "", "cluster started: metas %s, seed %d, scenario %s, faults %v", c.MetaAddrs(), cfg.Seed, cfg.Scenario, cfg.Faults)
	if _, _, err := c.WaitServing(ctx, 90*time.Second); err != nil {
		return rep, fmt.Errorf("cluster never came up: %w", err)
	}

	wc := cfg.Workload
	wc.Cluster, wc.Token, wc.Seed = c.MetaAddrs(), c.Token, cfg.Seed
	clientLog, err := os.Create(filepath.Join(cfg.Dir, "clients.log"))
	if err != nil {
		return rep, err
	}
	defer clientLog.Close()
	wc.Logger = slog.New(slog.NewTextHandler(clientLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
	w, err := NewWorkload(sctx, wc, cc.ChunkSizeOrDefault(), h)
	scancel()
	if err != nil {
		return rep, err
	}
	defer w.Close()
	event("phase", "", "setup done: %d keys in %d files", len(w.Keys), len(w.paths))

	env := &Env{Cluster: c, Firewall: fw, Tmpfs: cc.Tmpfs, Imp: &Impairments{nodes: map[uint32]string{}, MaxNodes: min(3, nodes)}}
	var nemeses []Nemesis
	for _, k := range cfg.Faults {
		n, err := NewNemesis(k, env)
		if err != nil {
			if !slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.HasPrefix(s, k+":") }) {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", k, err))
				event("skip", k, "%v", err)
			}
			continue
		}
		nemeses = append(nemeses, n)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned here: ended by wcancel, waited for below
		defer close(done)
		w.Run(wctx)
	}()
	event("phase", "", "faults for %v", cfg.Duration)
	rep.Faults = Schedule(ctx, rng, nemeses, cfg.Duration, event)
	// Everything is healed; a process that exited on its own comes back.
	for _, p := range c.Procs() {
		if !p.Running() {
			event("restart", "", "%s was not running after the heal; starting it", p.Name)
			if err := p.Start(); err != nil {
				rep.Errors = append(rep.Errors, err.Error())
			}
		}
	}
	event("phase", "", "healed; waiting up to %v for every target to serve", cfg.RecoverWithin)
	m, took, werr := c.WaitServing(ctx, cfg.RecoverWithin)
	rep.RecoverTime, rep.Recovered = took, werr == nil
	wcancel()
	<-done
	if werr != nil {
		event("phase", "", "no recovery: %v", werr)
	} else {
		event("phase", "", "every target serving after %v", rep.RecoverTime.Round(time.Millisecond))
	}
	// The final reads: every key read three times (on different
	// replicas), each tried up to three times, within a minute; when the
	// cluster did not recover, what can still be read, within 20 s.
	budget := time.Minute
	if !rep.Recovered {
		budget = 20 * time.Second
	}
	fctx, fcancel := context.WithTimeout(ctx, budget)
	missing := w.FinalReads(fctx, 3, 3)
	fcancel()
	event("phase", "", "final reads done (%d keys unread)", missing)

	// The final map, then a clean stop, then the targets offline.
	if fm, err := c.ClusterMap(ctx); err == nil {
		m = fm
	}
	if m != nil {
		b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(m)
		os.WriteFile(filepath.Join(cfg.Dir, "final-map.json"), b, 0o644)
	}
	expect := w.ChunkChain() // before Close, which lets go of the files
	w.Close()
	if err := c.Stop(20 * time.Second); err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("clean stop: %v", err))
	}
	event("phase", "", "stopped")
	rep.Replicas = checkOffline(c, m, expect, cc.ChunkSizeOrDefault())

	ops := h.Ops()
	for _, o := range ops {
		if o.Err != "" && o.Status != StatusCorrupt {
			rep.ErrorKinds[errorKind(o.Err)]++
		}
	}
	rep.Verdict = CheckHistory(ops, w.Keys, 30*time.Second, cfg.Dir)
	return rep, nil
}

// ChunkSizeOrDefault is the chunk size the cluster runs with.
func (cc ClusterConfig) ChunkSizeOrDefault() int {
	if cc.ChunkSize > 0 {
		return cc.ChunkSize
	}
	return 64 << 10
}

// checkOffline reads every target of the stopped cluster and compares
// the replicas of each chain under the final map m; expect places the
// workload's chunks.
func checkOffline(c *Cluster, m *mgmtdpb.ClusterMap, expect func(chunkio.ID) (uint32, bool), chunkSize int) []string {
	if m == nil {
		return []string{"no final cluster map"}
	}
	targets := map[uint32]TargetChunks{}
	var problems []string
	for _, p := range c.Nodes {
		tc, err := LoadTarget(TargetDir(p.Dir, p.Target), max(chunkSize, 4<<20))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		targets[p.Target] = tc
	}
	return append(problems, CheckReplicas(m, targets, expect)...)
}

// errorKind is an error message with its numbers and addresses blanked,
// so that errors of one kind count together.
func errorKind(msg string) string {
	b := []byte(msg)
	out := b[:0]
	for i := 0; i < len(b); i++ {
		if b[i] >= '0' && b[i] <= '9' {
			for i+1 < len(b) && (b[i+1] >= '0' && b[i+1] <= '9' || b[i+1] == '.' || b[i+1] == ':') {
				i++
			}
			out = append(out, 'N')
			continue
		}
		out = append(out, b[i])
	}
	s := string(out)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
