package hosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 17's measurements on emulated hosts (BENCHMARKS.md, "Scale-out
// and recovery on emulated hosts"): `make bench-hosts`, root only. Each
// benchmark runs its whole measurement once, whatever b.N, and logs its
// figures; the Tiny tests run the same code at a size that takes seconds.

// benchContext is cancelled by an interrupt, so that a benchmark stopped
// with ^C still closes its Net (processes and namespaces) in its cleanup;
// a second interrupt kills the process as usual (and the next run's Open
// removes what it left).
func benchContext(tb testing.TB, limit time.Duration) context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	ctx, cancel := context.WithTimeout(ctx, limit)
	tb.Cleanup(func() {
		cancel()
		stop()
	})
	return ctx
}

// envInt is $name as an integer, or def.
func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		tb.Fatalf("$%s=%q: want a positive integer", name, s)
	}
	return v
}

// sampleSet is a folder dataset on local disk (one class directory of
// files of one size): what `sluice dataset import --format folder` reads.
type sampleSet struct {
	name    string // the dataset's name once imported
	dir     string
	size    int // bytes per sample
	samples int
	// byteSum is what `sluice dataset bench --check` sums in one epoch:
	// every byte of the data column and of the path column.
	byteSum uint64
}

// makeSamples writes total bytes of random samples of size bytes each.
func makeSamples(dir, name string, size, total int) (sampleSet, error) {
	s := sampleSet{name: name, dir: filepath.Join(dir, name), size: size, samples: max(total/size, 1)}
	class := filepath.Join(s.dir, "c")
	if err := os.MkdirAll(class, 0o755); err != nil {
		return s, err
	}
	rng := rand.NewChaCha8([32]byte{byte(size), byte(total >> 20)})
	buf := make([]byte, size)
	for i := range s.samples {
		rng.Read(buf)
		file := fmt.Sprintf("s%06d", i)
		if err := os.WriteFile(filepath.Join(class, file), buf, 0o644); err != nil {
			return s, fmt.Errorf("make samples: %w", err)
		}
		for _, b := range buf {
			s.byteSum += uint64(b)
		}
		for _, b := range []byte("c/" + file) {
			s.byteSum += uint64(b)
		}
	}
	return s, nil
}

// bytes is the sample data in the set.
func (s sampleSet) bytes() int64 { return int64(s.samples) * int64(s.size) }

// batch is the loader's batch for the set: 16 MiB of samples (16 of
// 1 MiB, 256 of 64 KiB), fewer for a set smaller than four batches.
func (s sampleSet) batch() int { return max(1, min(16<<20/s.size, s.samples/4)) }

func (c *sluiceCluster) importSet(ctx context.Context, s sampleSet) error {
	_, err := c.sluice(ctx, "dataset", "import", "-q", "--format", "folder", "--shard-mib", "64", s.dir, s.name)
	return err
}

// epochResult is what `sluice dataset bench` prints, and the client
// process's CPU time.
type epochResult struct {
	MBps    float64 `json:"mb_per_s"`
	Samples float64 `json:"samples_per_s"`
	Seconds float64 `json:"seconds"`
	ByteSum uint64  `json:"byte_sum"`
	CPU     float64 `json:"-"` // seconds of CPU the client process used, setup included
	// Busy is the machine's CPU seconds (every process's, the kernel's
	// forwarding included) while the client ran, from /proc/stat.
	Busy float64 `json:"-"`
}

// cpuBusy is the machine's busy CPU time so far (/proc/stat's first line:
// user, nice, system, irq and softirq; not idle, iowait, steal, nor guest
// time, which user already counts), in seconds.
func cpuBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat begins %q", line)
	}
	var busy float64
	for i, v := range f[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return busy / 100, nil // USER_HZ, 100 on Linux
}

// bench runs epochs of the loader's shuffled epoch of s from the client
// host; check has every sample's index and every byte checked.
func (c *sluiceCluster) bench(ctx context.Context, s sampleSet, epochs int, check bool) (epochResult, error) {
	args := []string{"dataset", "bench", s.name, "--batch-size", strconv.Itoa(s.batch()), "--epochs", strconv.Itoa(epochs)}
	if check {
		args = append(args, "--check")
	}
	var r epochResult
	busy0, err := cpuBusy()
	if err != nil {
		return r, err
	}
	p, err := c.run(ctx, args...)
	if err != nil {
		return r, err
	}
	busy1, err := cpuBusy()
	if err != nil {
		return r, err
	}
	out := p.Output()
	line := out[strings.LastIndex(out, "{"):]
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, fmt.Errorf("dataset bench printed %q: %w", out, err)
	}
	st := p.Cmd.ProcessState
	r.CPU = (st.UserTime() + st.SystemTime()).Seconds()
	r.Busy = busy1 - busy0
	return r, nil
}

// sum adds up xs.
func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// spread is max ÷ mean of xs (1 when even; 0 for nothing).
func spread(xs []float64) float64 {
	total := sum(xs)
	if total == 0 {
		return 0
	}
	return slices.Max(xs) / (total / float64(len(xs)))
}

func deltas(after, before []float64) []float64 {
	out := make([]float64, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}

// median and range of xs, as "M (LO–HI)".
func medianRange(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	f := func(v float64) string { return fmt.Sprintf(format, v) }
	return f(median(xs)) + " (" + f(slices.Min(xs)) + "–" + f(slices.Max(xs)) + ")"
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// scaleParams shape runScaleOut.
type scaleParams struct {
	Nodes          []int // storage node counts, each its own cluster
	Rate           int64 // bytes per second, each storage host's link
	Bytes          int   // of each sample size
	Sizes          []int // sample sizes
	Rounds         int
	TargetsPerNode int
	ChunkSize      int
	// Check has every epoch check every sample's index and bytes
	// (slower: for the tiny test).
	Check bool
	// Sweep are more rates (bytes per second, 0 for none) at which the
	// largest cluster runs in every round: where the machine's CPUs, not
	// the links, become the limit.
	Sweep []int64
}

// scaleRun is one measurement: cluster of Nodes nodes with links capped
// at Rate (0 for none), sample size, round.
type scaleRun struct {
	Nodes, Size, Round int
	Rate               int64
	Epochs             int
	epochResult
	// Spread is max ÷ mean of the bytes each storage node pushed.
	Spread float64
}

// scaleResult is every measurement, and each set as imported.
type scaleResult struct {
	Runs []scaleRun
	Sets []sampleSet
}

// runScaleOut starts one cluster per node count (replicas 1: a chain per
// target, every file striped over every chain), all at once on one Net
// with the client on a host of its own, imports every sample size into
// each, then in each round runs every cluster's shuffled epochs in turn,
// the order rotating from round to round. A cluster of N nodes runs N
// epochs, so each measurement takes about as long as the one-node one.
func runScaleOut(ctx context.Context, tb testing.TB, p scaleParams) scaleResult {
	tb.Helper()
	hostsNeeded := 1 // the client
	for _, n := range p.Nodes {
		hostsNeeded += 1 + n
	}
	n := New(tb, Config{Hosts: hostsNeeded})
	client := n.Host(0)
	next := 1
	clusters := make([]*sluiceCluster, len(p.Nodes))
	for i, nodes := range p.Nodes {
		meta, storage := n.Host(next), n.Hosts[next+1:next+1+nodes]
		next += 1 + nodes
		clusters[i] = startCluster(ctx, tb, clusterConfig{Meta: meta, Storage: storage, Client: client,
			TargetsPerNode: p.TargetsPerNode, Replicas: 1, ChunkSize: p.ChunkSize})
		clusters[i].setRate(tb, p.Rate)
	}
	var res scaleResult
	dir := tb.TempDir()
	for _, size := range p.Sizes {
		s, err := makeSamples(dir, fmt.Sprintf("s%dk", size>>10), size, p.Bytes)
		if err != nil {
			tb.Fatal(err)
		}
		res.Sets = append(res.Sets, s)
	}
	for i, c := range clusters {
		if _, err := c.waitReplicated(ctx, 100*time.Millisecond); err != nil {
			tb.Fatal(err)
		}
		for _, s := range res.Sets {
			t0 := time.Now()
			if err := c.importSet(ctx, s); err != nil {
				tb.Fatal(err)
			}
			tb.Logf("imported %s (%d samples of %d KiB) into %d nodes in %.1fs", s.name, s.samples, s.size>>10, p.Nodes[i], time.Since(t0).Seconds())
		}
	}
	largest := len(clusters) - 1
	measure := func(ci, round int, s sampleSet, rate int64) {
		c := clusters[ci]
		nodes := p.Nodes[ci]
		epochs := nodes
		if rate != p.Rate {
			c.setRate(tb, rate)
			defer c.setRate(tb, p.Rate)
			// As many bytes as a capped run's time would move, at least
			// as many epochs as one at the usual rate.
			if rate > p.Rate {
				epochs *= int(rate / p.Rate)
			} else if rate == 0 {
				epochs *= 8
			}
		}
		before := c.storageCounter(ctx, "sluice_storage_read_bytes_total")
		r, err := c.bench(ctx, s, epochs, p.Check)
		if err != nil {
			tb.Fatal(err)
		}
		pushed := deltas(c.storageCounter(ctx, "sluice_storage_read_bytes_total"), before)
		// The stripe covers every chain, so every node must serve.
		if i := slices.Index(pushed, 0); i >= 0 {
			tb.Fatalf("%d nodes: node %s pushed no bytes to the loader (each pushed %v MiB)", nodes, nodeName(i), mib(pushed))
		}
		spreadBytes := spread(pushed)
		res.Runs = append(res.Runs, scaleRun{Nodes: nodes, Size: s.size, Round: round, Rate: rate, Epochs: epochs, epochResult: r, Spread: spreadBytes})
		tb.Logf("round %d: %d nodes at %s, %d KiB samples: %.1f MB/s, %.0f samples/s, %d epochs in %.1fs, client CPU %.2f cores, machine %.2f cores, node bytes max/mean %.3f",
			round, nodes, rateName(rate), s.size>>10,
			r.MBps, r.Samples, epochs, r.Seconds, r.CPU/r.Seconds, r.Busy/r.Seconds, spreadBytes)
	}
	for round := range p.Rounds {
		for k := range clusters {
			ci := (k + round) % len(clusters)
			for _, s := range res.Sets {
				measure(ci, round, s, p.Rate)
			}
		}
		for _, rate := range p.Sweep {
			for _, s := range res.Sets {
				measure(largest, round, s, rate)
			}
		}
	}
	return res
}

func rateName(rate int64) string {
	if rate == 0 {
		return "no cap"
	}
	return fmt.Sprintf("%.0f MB/s", float64(rate)/1e6)
}

// fractions is, for each round, throughput at nodes ÷ (nodes × the
// one-node throughput of the same round), for one sample size, at the
// usual rate; with
// placed, divided by the most the placement allows (each node's link
// moves only its own chunks, so the epoch lasts as long as the busiest
// node's share: the fraction cannot exceed mean ÷ max of nodes' bytes).
func (r scaleResult) fractions(nodes, size int, rate int64, placed bool) []float64 {
	one := map[int]float64{}
	for _, run := range r.of(1, size, rate) {
		one[run.Round] = run.MBps
	}
	var out []float64
	for _, run := range r.of(nodes, size, rate) {
		if one[run.Round] > 0 {
			f := run.MBps / (float64(nodes) * one[run.Round])
			if placed {
				f *= run.Spread
			}
			out = append(out, f)
		}
	}
	return out
}

// sweep is, for each round, throughput at nodes and rate ÷ (rate ÷ the
// usual rate × throughput at the usual rate in the same round): 1 while
// the links are the limit; 0 < rate only.
func (r scaleResult) sweep(nodes, size int, usual, rate int64) []float64 {
	base := map[int]float64{}
	for _, run := range r.of(nodes, size, usual) {
		base[run.Round] = run.MBps
	}
	var out []float64
	for _, run := range r.of(nodes, size, rate) {
		if base[run.Round] > 0 && rate > 0 {
			out = append(out, run.MBps/(float64(rate)/float64(usual)*base[run.Round]))
		}
	}
	return out
}

// of is the runs at nodes, size and rate.
func (r scaleResult) of(nodes, size int, rate int64) []scaleRun {
	var out []scaleRun
	for _, run := range r.Runs {
		if run.Nodes == nodes && run.Size == size && run.Rate == rate {
			out = append(out, run)
		}
	}
	return out
}

// field picks f of each run.
func field(runs []scaleRun, f func(scaleRun) float64) []float64 {
	var out []float64
	for _, run := range runs {
		out = append(out, f(run))
	}
	return out
}

// report logs the summary table and reports each median fraction.
func (r scaleResult) report(b *testing.B, p scaleParams) {
	b.Logf("scale-out: links capped at %.0f MB/s, %d MiB per sample size, chunks %d KiB, %d targets per node, replicas 1, %d rounds",
		float64(p.Rate)/1e6, p.Bytes>>20, p.ChunkSize>>10, p.TargetsPerNode, p.Rounds)
	line := func(runs []scaleRun, label, ratio string) {
		b.Logf("%s: %s MB/s; %s; client CPU %s cores, machine %s cores, node bytes max/mean %s", label,
			medianRange(field(runs, func(s scaleRun) float64 { return s.MBps }), "%.1f"), ratio,
			medianRange(field(runs, func(s scaleRun) float64 { return s.CPU / s.Seconds }), "%.2f"),
			medianRange(field(runs, func(s scaleRun) float64 { return s.Busy / s.Seconds }), "%.2f"),
			medianRange(field(runs, func(s scaleRun) float64 { return s.Spread }), "%.3f"))
	}
	largest := p.Nodes[len(p.Nodes)-1]
	for _, size := range p.Sizes {
		for _, n := range p.Nodes {
			f := r.fractions(n, size, p.Rate, false)
			b.ReportMetric(median(f), fmt.Sprintf("frac_n%d_%dKiB", n, size>>10))
			line(r.of(n, size, p.Rate), fmt.Sprintf("%d KiB, %d nodes", size>>10, n),
				"of N × one node "+medianRange(f, "%.3f")+", of the placement's bound "+medianRange(r.fractions(n, size, p.Rate, true), "%.3f"))
		}
		for _, rate := range p.Sweep {
			ratio := "the machine's ceiling"
			if rate > 0 {
				ratio = "of rate × the usual rate's " + medianRange(r.sweep(largest, size, p.Rate, rate), "%.3f")
			}
			line(r.of(largest, size, rate), fmt.Sprintf("%d KiB, %d nodes at %s", size>>10, largest, rateName(rate)), ratio)
		}
	}
}

// BenchmarkScaleOut: storage on 1, 2, 4 and 8 hosts, each link capped
// at $SLUICE_HOSTS_RATE_MB MB/s [25]; $SLUICE_HOSTS_MIB MiB [256] each of
// 1 MiB and 64 KiB samples; $SLUICE_HOSTS_ROUNDS rounds [3]; chunks of
// $SLUICE_HOSTS_CHUNK_KIB KiB [256].
func BenchmarkScaleOut(b *testing.B) {
	sluiceBin(b)
	p := scaleParams{Nodes: []int{1, 2, 4, 8}, Sizes: []int{1 << 20, 64 << 10}, TargetsPerNode: 2,
		Rate:      int64(envInt(b, "SLUICE_HOSTS_RATE_MB", 25)) * 1e6,
		Bytes:     envInt(b, "SLUICE_HOSTS_MIB", 256) << 20,
		Rounds:    envInt(b, "SLUICE_HOSTS_ROUNDS", 3),
		ChunkSize: envInt(b, "SLUICE_HOSTS_CHUNK_KIB", 256) << 10}
	p.Sweep = []int64{2 * p.Rate, 4 * p.Rate, 8 * p.Rate, 0}
	if s := os.Getenv("SLUICE_HOSTS_NODES"); s != "" {
		p.Nodes = nil
		for f := range strings.SplitSeq(s, ",") {
			v, err := strconv.Atoi(f)
			if err != nil || v <= 0 {
				b.Fatalf("$SLUICE_HOSTS_NODES=%q: want node counts such as 1,2,4,8", s)
			}
			p.Nodes = append(p.Nodes, v)
		}
	}
	ctx := benchContext(b, 50*time.Minute)
	for range b.N {
		r := runScaleOut(ctx, b, p)
		r.report(b, p)
	}
}

// TestScaleOutTiny runs the scale-out measurement's code at a tiny size:
// every epoch delivers every sample once and every byte imported.
func TestScaleOutTiny(t *testing.T) {
	sluiceBin(t)
	ctx := benchContext(t, 2*time.Minute)
	p := scaleParams{Nodes: []int{1, 2}, Sizes: []int{64 << 10}, Bytes: 4 << 20, Rounds: 1, TargetsPerNode: 2,
		ChunkSize: 256 << 10, Rate: 50e6, Check: true}
	r := runScaleOut(ctx, t, p)
	set := r.Sets[0]
	if len(r.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(r.Runs))
	}
	for _, run := range r.Runs {
		if got, want := run.ByteSum, uint64(run.Epochs)*set.byteSum; got != want {
			t.Errorf("%d nodes: the epochs' bytes sum to %d, the imported samples' to %d", run.Nodes, got, want)
		}
		if got := int(run.Samples*run.Seconds + 0.5); got != run.Epochs*set.samples {
			t.Errorf("%d nodes: %d samples in %d epochs, want %d each", run.Nodes, got, run.Epochs, set.samples)
		}
	}
	if f := r.fractions(2, set.size, p.Rate, false); len(f) != 1 || f[0] <= 0 {
		t.Errorf("fractions at 2 nodes: %v", f)
	}
}

// recoveryParams shape runRecovery.
type recoveryParams struct {
	Nodes          int
	TargetsPerNode int
	Rate           int64 // bytes per second, each storage host's link
	Bytes          int   // of 1 MiB samples, imported with replicas 3
	SampleSize     int
	ChunkSize      int
	Rounds         int // each replaces another node
	// Drain replaces a dead node by draining it (`sluice admin drain
	// --node`: its replicas move to the other nodes) instead of
	// restarting it empty; each round then has a cluster of its own.
	Drain bool
	// Fresh gives each round a cluster of its own also when the node is
	// restarted empty: a replacement rejoins its chains at their tails,
	// so on one cluster each round's resync follows the rounds before.
	Fresh bool
}

// recoveryRound is one node killed and replaced.
type recoveryRound struct {
	Victim int
	Drain  bool
	// Lapse is from the kill until mgmtd had the node's targets offline;
	// Resync from the replacement's start until every chain had all its
	// replicas serving again; Total from the kill to that.
	Lapse, Resync, Total time.Duration
	// Served is the resync bytes each surviving node sent, in node order
	// without the victim; Sources the victim's chains each was to resync
	// by the chains' order before the kill.
	Served, Sources []float64
}

func (r recoveryRound) sent() float64 { return sum(r.Served) }

// runRecovery imports a dataset with replicas 3 over capped hosts, then
// in each round kills one storage node's process, waits until mgmtd has
// taken its targets offline, restarts it under the same name with an
// empty directory (a replaced machine: its targets rejoin their chains
// as syncing and are resynced from their predecessors), and times until
// every chain is whole again, reading each surviving node's resync bytes
// from its /metrics. After the last round every sample is verified.
func runRecovery(ctx context.Context, tb testing.TB, p recoveryParams) []recoveryRound {
	tb.Helper()
	if p.Drain || p.Fresh {
		// A drained node leaves for good: every round starts afresh.
		var rounds []recoveryRound
		one := p
		one.Rounds = 1
		for range p.Rounds {
			rounds = append(rounds, recoverOn(ctx, tb, one, len(rounds))...)
		}
		return rounds
	}
	return recoverOn(ctx, tb, p, 0)
}

// recoverOn is runRecovery on one Net, its first victim picked as in
// round first.
func recoverOn(ctx context.Context, tb testing.TB, p recoveryParams, first int) []recoveryRound {
	tb.Helper()
	n, err := Open(Config{Hosts: p.Nodes + 2})
	if errors.Is(err, ErrUnsupported) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			tb.Error(err)
		}
	}()
	client, meta := n.Host(0), n.Host(1)
	storage := n.Hosts[2:]
	c := startCluster(ctx, tb, clusterConfig{Meta: meta, Storage: storage, Client: client,
		TargetsPerNode: p.TargetsPerNode, Replicas: 3, ChunkSize: p.ChunkSize})
	c.setRate(tb, p.Rate)
	set, err := makeSamples(tb.TempDir(), "recovery", p.SampleSize, p.Bytes)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.waitReplicated(ctx, 100*time.Millisecond); err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	if err := c.importSet(ctx, set); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("imported %d MiB (%d samples) with replicas 3 over %d nodes in %.1fs", set.bytes()>>20, set.samples, p.Nodes, time.Since(t0).Seconds())
	// What the chains' order promises each node's replacement, before
	// any is replaced.
	var promised []string
	for i := range p.Nodes {
		sources, err := c.resyncSources(ctx, i)
		if err != nil {
			tb.Fatal(err)
		}
		promised = append(promised, fmt.Sprintf("%s %v", nodeName(i), sources))
	}
	tb.Logf("chains each node would resync if another were replaced (by the chains' order): %s", strings.Join(promised, "; "))
	var rounds []recoveryRound
	for round := first; round < first+p.Rounds; round++ {
		victim := round * 3 % p.Nodes
		r := recoveryRound{Victim: victim, Drain: p.Drain}
		sources, err := c.resyncSources(ctx, victim)
		if err != nil {
			tb.Fatal(err)
		}
		r.Sources = slices.Delete(sources, victim, victim+1)
		before := c.storageCounter(ctx, "sluice_storage_resync_bytes_total")
		kill := time.Now()
		if err := c.storage[victim].Kill(); err != nil {
			tb.Fatal(err)
		}
		<-c.storage[victim].Done()
		if err := c.waitOffline(ctx, victim); err != nil {
			tb.Fatal(err)
		}
		r.Lapse = time.Since(kill)
		start := time.Now()
		if p.Drain {
			if _, err := c.sluice(ctx, "admin", "drain", "--node", nodeName(victim)); err != nil {
				tb.Fatal(err)
			}
		} else if err := c.startStorage(ctx, victim, true); err != nil {
			tb.Fatal(err)
		}
		done, err := c.waitReplicated(ctx, 50*time.Millisecond)
		if err != nil {
			tb.Fatal(err)
		}
		r.Resync, r.Total = done.Sub(start), done.Sub(kill)
		// The victim's counter started again from 0 with its process.
		served := deltas(c.storageCounter(ctx, "sluice_storage_resync_bytes_total"), before)
		r.Served = slices.Delete(served, victim, victim+1)
		rounds = append(rounds, r)
		how := "replaced by an empty node"
		if p.Drain {
			how = "drained"
		}
		tb.Logf("round %d: node %s killed; offline after %.1fs; %s and resynced in %.1fs (%.1fs from the kill); %.1f MiB served by the survivors, max/mean %.3f, each %v MiB; chains each resynced %v, max/mean %.3f",
			round, nodeName(victim), r.Lapse.Seconds(), how, r.Resync.Seconds(), r.Total.Seconds(), r.sent()/(1<<20), spread(r.Served), mib(r.Served),
			r.Sources, spread(r.Sources))
	}
	if _, err := c.sluice(ctx, "dataset", "verify", set.name); err != nil {
		tb.Fatal(err)
	}
	return rounds
}

func mib(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.1f", x/(1<<20))
	}
	return out
}

// waitOffline waits until mgmtd reports every target of storage node i
// offline (its lease lapsed).
func (c *sluiceCluster) waitOffline(ctx context.Context, i int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		mfs, err := c.scrape(ctx, c.cfg.Meta)
		if err == nil && int(metricSum(mfs, "sluice_mgmtd_target_state", map[string]string{"node": nodeName(i), "state": "offline"})) == c.cfg.TargetsPerNode {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s's targets not offline (last error %v): %w", nodeName(i), err, ctx.Err())
		case <-tick.C:
		}
	}
}

// BenchmarkRecovery: 8 storage hosts capped at $SLUICE_HOSTS_RATE_MB MB/s
// [25], 7 targets each, $SLUICE_HOSTS_RECOVERY_MIB MiB [512] of 1 MiB
// samples with replicas 3, $SLUICE_HOSTS_ROUNDS nodes replaced in turn [3]:
// restarted with an empty directory on one cluster, with
// $SLUICE_HOSTS_REPLACE=fresh so on a cluster of its own each round, or
// with $SLUICE_HOSTS_REPLACE=drain drained (`sluice admin drain`, which the
// binary must have; a cluster per round).
func BenchmarkRecovery(b *testing.B) {
	sluiceBin(b)
	p := recoveryParams{Nodes: 8, TargetsPerNode: 7, SampleSize: 1 << 20,
		Rate:      int64(envInt(b, "SLUICE_HOSTS_RATE_MB", 25)) * 1e6,
		Bytes:     envInt(b, "SLUICE_HOSTS_RECOVERY_MIB", 512) << 20,
		Rounds:    envInt(b, "SLUICE_HOSTS_ROUNDS", 3),
		ChunkSize: envInt(b, "SLUICE_HOSTS_CHUNK_KIB", 256) << 10}
	switch r := os.Getenv("SLUICE_HOSTS_REPLACE"); r {
	case "", "restart":
	case "fresh":
		p.Fresh = true
	case "drain":
		p.Drain = true
	default:
		b.Fatalf("$SLUICE_HOSTS_REPLACE=%q: want restart, fresh or drain", r)
	}
	mode := "restart empty"
	switch {
	case p.Drain:
		mode = "drain"
	case p.Fresh:
		mode = "restart empty, a cluster per round"
	}
	ctx := benchContext(b, 30*time.Minute)
	for range b.N {
		rounds := runRecovery(ctx, b, p)
		var resync, total, spreads, chainSpreads, secsPerGB []float64
		for _, r := range rounds {
			resync = append(resync, r.Resync.Seconds())
			total = append(total, r.Total.Seconds())
			spreads = append(spreads, spread(r.Served))
			chainSpreads = append(chainSpreads, spread(r.Sources))
			// The replacement receives everything through its own capped
			// link: the resync cannot beat bytes ÷ rate.
			secsPerGB = append(secsPerGB, (r.sent()/float64(p.Rate))/r.Resync.Seconds())
		}
		b.Logf("recovery (%s): %d nodes × %d targets, replicas 3, links %.0f MB/s, %d MiB imported: resync %s s, kill to whole %s s, survivors' bytes max/mean %s (chains resynced per survivor max/mean %s), (bytes ÷ rate) ÷ resync time %s",
			mode, p.Nodes, p.TargetsPerNode, float64(p.Rate)/1e6, p.Bytes>>20, medianRange(resync, "%.1f"), medianRange(total, "%.1f"),
			medianRange(spreads, "%.3f"), medianRange(chainSpreads, "%.3f"), medianRange(secsPerGB, "%.2f"))
		b.ReportMetric(median(resync), "resync_s")
		b.ReportMetric(median(spreads), "served_max/mean")
	}
}

// TestRecoveryTiny runs the recovery measurement's code at a tiny size:
// the replaced node's chains come back whole, the survivors sent at
// least what it held, and every sample verifies afterwards.
func TestRecoveryTiny(t *testing.T) {
	sluiceBin(t)
	ctx := benchContext(t, 2*time.Minute)
	p := recoveryParams{Nodes: 4, TargetsPerNode: 2, Rate: 50e6, Bytes: 4 << 20, SampleSize: 64 << 10, ChunkSize: 256 << 10, Rounds: 1}
	rounds := runRecovery(ctx, t, p)
	// The victim held 3 replicas' share of 4 MiB over 4 nodes; chunks
	// scatter, so ask for half of that.
	if got, want := rounds[0].sent(), float64(p.Bytes)*3/4/2; got < want {
		t.Errorf("the survivors sent %.0f resync bytes, want at least %.0f", got, want)
	}
	// Each of the victim's targets is in 3 chains.
	var chains float64
	for _, n := range rounds[0].Sources {
		chains += n
	}
	if want := float64(3 * p.TargetsPerNode); chains != want {
		t.Errorf("the survivors were to resync %v chains, want %v in all", rounds[0].Sources, want)
	}
}
