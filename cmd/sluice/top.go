package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

func newTopCmd() *cobra.Command {
	var once, asJSON bool
	var interval time.Duration
	var token string
	cmd := &cobra.Command{
		Use:   "top ENDPOINT...",
		Short: "Live view of a cluster from its processes' /metrics: throughput, IOPS, latency, chain states, resyncs",
		Long: `Scrapes the /metrics of the given processes (host:port or URLs of their --http
addresses: a meta replica for target and chain states, the storage nodes for
their targets' traffic) every --interval and shows, per target, reads and
writes per second, bytes per second, mean update latency, chunks and free
disk, and per chain its members' states, with resyncs in progress. Rates
are over the last interval. --once prints one view (two scrapes --interval
apart) and exits; --json prints it as JSON for scripts.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = os.Getenv("SLUICE_TOKEN")
			}
			s := &scraper{client: &http.Client{Timeout: 5 * time.Second}, token: token}
			ctx := cmd.Context()
			prev := s.scrapeAll(ctx, args)
			out := cmd.OutOrStdout()
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(stop)
			for {
				select {
				case <-time.After(interval):
				case <-stop:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
				cur := s.scrapeAll(ctx, args)
				v := buildTopView(prev, cur)
				prev = cur
				switch {
				case asJSON:
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(v); err != nil {
						return err
					}
				default:
					if !once {
						fmt.Fprint(out, "\033[H\033[2J") // home and clear: a refreshing screen
					}
					writeTop(out, v)
				}
				if once {
					return nil
				}
			}
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one view and exit")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print views as JSON")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between scrapes (the rates' window)")
	cmd.Flags().StringVar(&token, "token", "", "cluster token, for endpoints run with --http-guard (default $SLUICE_TOKEN)")
	return cmd
}

// scraper reads /metrics endpoints.
type scraper struct {
	client *http.Client
	token  string
}

// scrape is one endpoint's metric families at one time, or why not.
type scrape struct {
	endpoint string
	at       time.Time
	families map[string]*dto.MetricFamily
	err      error
}

func (s *scraper) scrapeAll(ctx context.Context, endpoints []string) []scrape {
	out := make([]scrape, len(endpoints))
	for i, ep := range endpoints {
		out[i] = scrape{endpoint: ep, at: time.Now()}
		out[i].families, out[i].err = s.metrics(ctx, ep)
	}
	return out
}

// metrics scrapes one endpoint's /metrics and parses the text format.
func (s *scraper) metrics(ctx context.Context, endpoint string) (map[string]*dto.MetricFamily, error) {
	url := endpoint
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return mfs, nil
}

// topView is one view of the cluster: what `sluice top --json` prints.
type topView struct {
	Time       time.Time      `json:"time"`
	Endpoints  []topEndpoint  `json:"endpoints"`
	MapVersion uint64         `json:"map_version,omitempty"`
	Targets    []topTarget    `json:"targets"`
	Chains     []topChain     `json:"chains"`
	Resyncs    float64        `json:"resyncs_in_progress"`
	ResyncBps  float64        `json:"resync_bytes_per_second"`
	Loader     map[string]any `json:"loader,omitempty"`
}

type topEndpoint struct {
	Endpoint string `json:"endpoint"`
	Error    string `json:"error,omitempty"`
	// A storage node's mean read request latency over the interval
	// (seconds; 0 with no reads).
	ReadLatency float64 `json:"read_latency_seconds,omitempty"`
}

type topTarget struct {
	ID    uint32 `json:"id"`
	Node  string `json:"node,omitempty"`
	State string `json:"state,omitempty"`
	// Per second over the last interval.
	Reads      float64 `json:"reads_per_second"`
	ReadBytes  float64 `json:"read_bytes_per_second"`
	Writes     float64 `json:"writes_per_second"`
	WriteBytes float64 `json:"write_bytes_per_second"`
	// Mean update latency over the interval (seconds; 0 with no updates).
	UpdateLatency float64 `json:"update_latency_seconds"`
	Chunks        float64 `json:"chunks"`
	DiskFree      float64 `json:"disk_free_bytes"`
	DiskTotal     float64 `json:"disk_total_bytes"`
	CRCFailures   float64 `json:"crc_failures"`
}

type topChain struct {
	ID      uint32           `json:"id"`
	Version uint64           `json:"version"`
	Members []topChainMember `json:"members"`
}

type topChainMember struct {
	Target uint32 `json:"target"`
	State  string `json:"state"`
}

// series visits every sample of family name in a scrape set.
func series(set []scrape, name string, fn func(labels map[string]string, m *dto.Metric)) {
	for _, s := range set {
		mf := s.families[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fn(labels, m)
		}
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// byTarget sums family name's values per target label.
func byTarget(set []scrape, name string) map[uint32]float64 {
	out := map[uint32]float64{}
	series(set, name, func(l map[string]string, m *dto.Metric) {
		if id, err := strconv.ParseUint(l["target"], 10, 32); err == nil {
			if m.Histogram != nil {
				out[uint32(id)] += m.Histogram.GetSampleSum()
			} else {
				out[uint32(id)] += value(m)
			}
		}
	})
	return out
}

// histCount sums a histogram's sample counts per target.
func histCount(set []scrape, name string) map[uint32]float64 {
	out := map[uint32]float64{}
	series(set, name, func(l map[string]string, m *dto.Metric) {
		if id, err := strconv.ParseUint(l["target"], 10, 32); err == nil && m.Histogram != nil {
			out[uint32(id)] += float64(m.Histogram.GetSampleCount())
		}
	})
	return out
}

func total(set []scrape, name string) float64 {
	sum := 0.0
	series(set, name, func(_ map[string]string, m *dto.Metric) { sum += value(m) })
	return sum
}

// buildTopView makes the view of cur, with rates against prev.
func buildTopView(prev, cur []scrape) topView {
	v := topView{Time: time.Now().UTC()}
	secs := 0.0
	for i := range cur {
		e := topEndpoint{Endpoint: cur[i].endpoint}
		if cur[i].err != nil {
			e.Error = cur[i].err.Error()
		}
		if i < len(prev) {
			e.ReadLatency = meanLatency(prev[i].families["sluice_storage_read_seconds"], cur[i].families["sluice_storage_read_seconds"])
		}
		v.Endpoints = append(v.Endpoints, e)
		if i < len(prev) {
			secs = max(secs, cur[i].at.Sub(prev[i].at).Seconds())
		}
	}
	rate := func(name string) map[uint32]float64 {
		a, b := byTarget(prev, name), byTarget(cur, name)
		out := map[uint32]float64{}
		for id, x := range b {
			if secs > 0 {
				out[id] = max(0, x-a[id]) / secs
			}
		}
		return out
	}
	targets := map[uint32]*topTarget{}
	get := func(id uint32) *topTarget {
		if targets[id] == nil {
			targets[id] = &topTarget{ID: id}
		}
		return targets[id]
	}
	series(cur, "sluice_mgmtd_map_version", func(_ map[string]string, m *dto.Metric) {
		v.MapVersion = max(v.MapVersion, uint64(value(m)))
	})
	series(cur, "sluice_mgmtd_target_state", func(l map[string]string, m *dto.Metric) {
		if id, err := strconv.ParseUint(l["target"], 10, 32); err == nil && value(m) == 1 {
			t := get(uint32(id))
			t.Node, t.State = l["node"], l["state"]
		}
	})
	for id, x := range rate("sluice_storage_reads_total") {
		get(id).Reads = x
	}
	for id, x := range rate("sluice_storage_read_bytes_total") {
		get(id).ReadBytes = x
	}
	for id, x := range rate("sluice_storage_writes_total") {
		get(id).Writes = x
	}
	for id, x := range rate("sluice_storage_write_bytes_total") {
		get(id).WriteBytes = x
	}
	sumA, sumB := byTarget(prev, "sluice_storage_update_seconds"), byTarget(cur, "sluice_storage_update_seconds")
	cntA, cntB := histCount(prev, "sluice_storage_update_seconds"), histCount(cur, "sluice_storage_update_seconds")
	for id, n := range cntB {
		if d := n - cntA[id]; d > 0 {
			get(id).UpdateLatency = (sumB[id] - sumA[id]) / d
		}
	}
	for id, x := range byTarget(cur, "sluice_storage_chunks") {
		get(id).Chunks = x
	}
	for id, x := range byTarget(cur, "sluice_storage_disk_free_bytes") {
		get(id).DiskFree = x
	}
	for id, x := range byTarget(cur, "sluice_storage_disk_total_bytes") {
		get(id).DiskTotal = x
	}
	for id, x := range byTarget(cur, "sluice_storage_crc_failures_total") {
		get(id).CRCFailures = x
	}
	for _, t := range targets {
		v.Targets = append(v.Targets, *t)
	}
	slices.SortFunc(v.Targets, func(a, b topTarget) int { return int(a.ID) - int(b.ID) })
	chains := map[uint32]*topChain{}
	series(cur, "sluice_mgmtd_chain_version", func(l map[string]string, m *dto.Metric) {
		if id, err := strconv.ParseUint(l["chain"], 10, 32); err == nil {
			chains[uint32(id)] = &topChain{ID: uint32(id), Version: uint64(value(m))}
		}
	})
	series(cur, "sluice_mgmtd_chain_target_state", func(l map[string]string, m *dto.Metric) {
		id, err1 := strconv.ParseUint(l["chain"], 10, 32)
		t, err2 := strconv.ParseUint(l["target"], 10, 32)
		if c := chains[uint32(id)]; err1 == nil && err2 == nil && c != nil && value(m) == 1 {
			c.Members = append(c.Members, topChainMember{Target: uint32(t), State: l["state"]})
		}
	})
	for _, c := range chains {
		v.Chains = append(v.Chains, *c)
	}
	slices.SortFunc(v.Chains, func(a, b topChain) int { return int(a.ID) - int(b.ID) })
	v.Resyncs = total(cur, "sluice_storage_resyncs_in_progress")
	if secs > 0 {
		v.ResyncBps = max(0, total(cur, "sluice_storage_resync_bytes_total")-total(prev, "sluice_storage_resync_bytes_total")) / secs
	}
	if _, ok := familyIn(cur, "sluice_loader_stall_seconds_total"); ok {
		v.Loader = map[string]any{
			"batches_total":             total(cur, "sluice_loader_batches_total"),
			"stall_seconds_total":       total(cur, "sluice_loader_stall_seconds_total"),
			"memory_wait_seconds_total": total(cur, "sluice_loader_memory_wait_seconds_total"),
		}
	}
	return v
}

// meanLatency is the mean of a histogram's observations between two
// scrapes of it (0 with none).
func meanLatency(a, b *dto.MetricFamily) float64 {
	sum := func(mf *dto.MetricFamily) (s, n float64) {
		for _, m := range mf.GetMetric() {
			s += m.GetHistogram().GetSampleSum()
			n += float64(m.GetHistogram().GetSampleCount())
		}
		return s, n
	}
	sa, na := sum(a)
	sb, nb := sum(b)
	if nb <= na {
		return 0
	}
	return (sb - sa) / (nb - na)
}

func familyIn(set []scrape, name string) (*dto.MetricFamily, bool) {
	for _, s := range set {
		if mf := s.families[name]; mf != nil {
			return mf, true
		}
	}
	return nil, false
}

// writeTop prints a view for people.
func writeTop(w io.Writer, v topView) {
	fmt.Fprintf(w, "sluice top  %s  map v%d  resyncs %g (%s/s)\n", v.Time.Format(time.TimeOnly), v.MapVersion, v.Resyncs, bytesIEC(uint64(v.ResyncBps)))
	for _, e := range v.Endpoints {
		switch {
		case e.Error != "":
			fmt.Fprintf(w, "  %s: %s\n", e.Endpoint, e.Error)
		case e.ReadLatency > 0:
			fmt.Fprintf(w, "  %s: reads %.2f ms\n", e.Endpoint, e.ReadLatency*1e3)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tnode\tstate\tread/s\tread B/s\twrite/s\twrite B/s\tupdate ms\tchunks\tfree\t")
	for _, t := range v.Targets {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%.0f\t%s\t%.2f\t%.0f\t%s\t\n", t.ID, t.Node, t.State, t.Reads, bytesIEC(uint64(t.ReadBytes)),
			t.Writes, bytesIEC(uint64(t.WriteBytes)), t.UpdateLatency*1e3, t.Chunks, bytesIEC(uint64(t.DiskFree)))
	}
	tw.Flush()
	for _, c := range v.Chains {
		parts := make([]string, len(c.Members))
		for i, m := range c.Members {
			parts[i] = fmt.Sprintf("%d:%s", m.Target, m.State)
		}
		fmt.Fprintf(w, "chain %d v%d: %s\n", c.ID, c.Version, strings.Join(parts, " "))
	}
	if v.Loader != nil {
		fmt.Fprintf(w, "loader: %v batches, stalled %.1fs in Next, read-ahead waited %.1fs for memory\n",
			v.Loader["batches_total"], v.Loader["stall_seconds_total"], v.Loader["memory_wait_seconds_total"])
	}
}
