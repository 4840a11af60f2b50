package hosts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What the tests and benchmarks here run: `sluice server` processes on
// hosts of a Net, and `sluice` client commands on a host of their own.

// sluiceBin is $SLUICE_BIN, or skips tb.
func sluiceBin(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		tb.Skip("SLUICE_BIN is not set (the sluice binary: make build, then SLUICE_BIN=$PWD/bin/sluice)")
	}
	return bin
}

// writeToken writes a fresh cluster token to dir/token and returns it and
// the file's path.
func writeToken(tb testing.TB, dir string) (token, tokenFile string) {
	tb.Helper()
	token = fmt.Sprintf("hosts-%x", rand.Uint64())
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return token, tokenFile
}

// Ports every sluice process uses on its own host.
const (
	metaPort   = 7400
	raftPort   = 7401
	fabricPort = 7410
	httpPort   = 7480
)

// clusterConfig shapes a sluiceCluster. Storage node i (from 0) is named
// s<i+1> and holds targets i*TargetsPerNode+1 … (i+1)*TargetsPerNode.
type clusterConfig struct {
	Meta           *Host
	Storage        []*Host
	Client         *Host // runs the client commands and the scrapes
	TargetsPerNode int
	Replicas       int
	ChunkSize      int // bytes
	// Stripe is how many chains a file spreads over; 0 for all of the
	// table's (one chain per target).
	Stripe int
}

// sluiceCluster is a meta replica and storage nodes, each in its own host,
// with a directory and a token of its own.
type sluiceCluster struct {
	cfg       clusterConfig
	bin, dir  string
	token     string
	tokenFile string
	meta      *Proc
	storage   []*Proc // by node index; a killed node's entry stays until it is restarted
	web       *http.Client
}

// startCluster starts the meta replica and every storage node, and waits
// until each has said it serves (not yet until the chain table exists:
// waitReplicated).
func startCluster(ctx context.Context, tb testing.TB, cfg clusterConfig) *sluiceCluster {
	tb.Helper()
	if cfg.TargetsPerNode <= 0 {
		cfg.TargetsPerNode = 1
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Stripe <= 0 {
		cfg.Stripe = len(cfg.Storage) * cfg.TargetsPerNode
	}
	c := &sluiceCluster{cfg: cfg, bin: sluiceBin(tb), dir: tb.TempDir(), storage: make([]*Proc, len(cfg.Storage))}
	c.token, c.tokenFile = writeToken(tb, c.dir)
	// The test process reaches the hosts' HTTP servers from the client
	// host: the machine's own namespace has no route to them.
	c.web = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return cfg.Client.Dial(ctx, network, addr)
		}}}
	tb.Cleanup(c.web.CloseIdleConnections)
	m := cfg.Meta
	var err error
	c.meta, err = c.start(ctx, m, "m1", "meta", map[string]any{"id": "m1", "raft_bind": m.AddrPort(raftPort), "listen": c.metaAddr(),
		"members": map[string]string{"m1": m.AddrPort(raftPort)}, "chunk_size": cfg.ChunkSize, "stripe": cfg.Stripe,
		"expect_targets": len(cfg.Storage) * cfg.TargetsPerNode, "replicas": cfg.Replicas}, "meta serving on")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range cfg.Storage {
		if err := c.startStorage(ctx, i, false); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

func (c *sluiceCluster) metaAddr() string { return c.cfg.Meta.AddrPort(metaPort) }

// start writes a process's config and starts `sluice server` with it in
// h, waiting until it prints ready.
func (c *sluiceCluster) start(ctx context.Context, h *Host, name, role string, part map[string]any, ready string) (*Proc, error) {
	conf, err := json.Marshal(map[string]any{"dir": filepath.Join(c.dir, name), "token_file": c.tokenFile,
		"http": h.AddrPort(httpPort), role: part})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.dir, name+".json")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return nil, err
	}
	p, err := h.Start(exec.Command(c.bin, "server", "--role", role, "--config", path, "--log-level", "warn"))
	if err != nil {
		return nil, err
	}
	if err := p.Expect(ctx, ready); err != nil {
		return nil, err
	}
	return p, nil
}

// setRate caps every storage host's link at rate bytes per second (0:
// no cap).
func (c *sluiceCluster) setRate(tb testing.TB, rate int64) {
	tb.Helper()
	for _, h := range c.cfg.Storage {
		if err := h.SetRate(rate); err != nil {
			tb.Fatal(err)
		}
	}
}

// nodeName is storage node i's id.
func nodeName(i int) string { return fmt.Sprint("s", i+1) }

// startStorage starts storage node i; empty first removes what the node
// stored, as a machine replaced under the same name would come back.
func (c *sluiceCluster) startStorage(ctx context.Context, i int, empty bool) error {
	h, name := c.cfg.Storage[i], nodeName(i)
	if empty {
		if err := os.RemoveAll(filepath.Join(c.dir, name)); err != nil {
			return fmt.Errorf("empty node %s: %w", name, err)
		}
	}
	targets := make([]int, c.cfg.TargetsPerNode)
	for k := range targets {
		targets[k] = i*c.cfg.TargetsPerNode + k + 1
	}
	p, err := c.start(ctx, h, name, "storage", map[string]any{"cluster": c.metaAddr(), "node_id": name,
		"fabric_listen": h.AddrPort(fabricPort), "targets": targets, "chunk_size": c.cfg.ChunkSize}, "serving targets")
	if err != nil {
		return fmt.Errorf("start storage node %s: %w", name, err)
	}
	c.storage[i] = p
	return nil
}

// run runs `sluice ARGS --cluster … --token …` in the client host and
// returns it once it has ended.
func (c *sluiceCluster) run(ctx context.Context, args ...string) (*Proc, error) {
	args = append(args, "--cluster", c.metaAddr(), "--token", c.token, "--log-level", "warn")
	p, err := c.cfg.Client.Start(exec.CommandContext(ctx, c.bin, args...))
	if err != nil {
		return nil, err
	}
	if err := p.Wait(); err != nil {
		return p, fmt.Errorf("sluice %s: %w: %s", strings.Join(args[:min(len(args), 3)], " "), err, p.Output())
	}
	return p, nil
}

// sluice is run's output.
func (c *sluiceCluster) sluice(ctx context.Context, args ...string) (string, error) {
	p, err := c.run(ctx, args...)
	if p == nil {
		return "", err
	}
	return p.Output(), err
}

// scrape reads the /metrics of the process on h.
func (c *sluiceCluster) scrape(ctx context.Context, h *Host) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.AddrPort(httpPort)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.web.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", h.Addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", h.Addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", h.Addr, err)
	}
	return mfs, nil
}

// metricSum adds up family name's samples whose labels include every
// pair of want.
func metricSum(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// storageCounter is counter name summed over each storage node, in node
// order; a node that does not answer (killed) reads 0.
func (c *sluiceCluster) storageCounter(ctx context.Context, name string) []float64 {
	out := make([]float64, len(c.cfg.Storage))
	for i, h := range c.cfg.Storage {
		if mfs, err := c.scrape(ctx, h); err == nil {
			out[i] = metricSum(mfs, name, nil)
		}
	}
	return out
}

// servingMembers is how many chain memberships the meta replica reports
// serving, and how many the table has when every chain is complete.
func (c *sluiceCluster) servingMembers(ctx context.Context) (serving, want int, err error) {
	mfs, err := c.scrape(ctx, c.cfg.Meta)
	if err != nil {
		return 0, 0, err
	}
	chains := len(c.cfg.Storage) * c.cfg.TargetsPerNode
	return int(metricSum(mfs, "sluice_mgmtd_chain_target_state", map[string]string{"state": "serving"})), chains * c.cfg.Replicas, nil
}

// waitReplicated polls the meta replica every poll until every chain has
// all its replicas serving, and returns when it saw that.
func (c *sluiceCluster) waitReplicated(ctx context.Context, poll time.Duration) (time.Time, error) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		serving, want, err := c.servingMembers(ctx)
		if err == nil && serving == want {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("chains not fully replicated (%d of %d members serving, last error %v): %w", serving, want, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// resyncSources counts, for each storage node, the chains of node victim
// it would resync if the victim were replaced now: in each chain the
// victim is in, the last other member, which is the serving tail once the
// victim has left and the predecessor of the replacement's target, which
// rejoins at the chain's end.
func (c *sluiceCluster) resyncSources(ctx context.Context, victim int) ([]float64, error) {
	out, err := c.sluice(ctx, "status", "--json")
	if err != nil {
		return nil, err
	}
	var st struct {
		Chains []struct {
			Targets []struct {
				Target int `json:"target"`
			} `json:"targets"`
		} `json:"chains"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
		return nil, fmt.Errorf("sluice status --json: %w", err)
	}
	node := func(target int) int { return (target - 1) / c.cfg.TargetsPerNode }
	counts := make([]float64, len(c.cfg.Storage))
	for _, ch := range st.Chains {
		last := -1
		in := false
		for _, t := range ch.Targets {
			if n := node(t.Target); n == victim {
				in = true
			} else {
				last = n
			}
		}
		if in && last >= 0 {
			counts[last]++
		}
	}
	return counts, nil
}
