package meta

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Metrics are the meta service's Prometheus metrics: calls by method and
// outcome, their latency, Raft's state and progress, and how long commands
// take to commit and apply.
type Metrics struct {
	reg   *prometheus.Registry
	calls *prometheus.CounterVec
	took  *prometheus.HistogramVec
	apply prometheus.Histogram
	coll  *CollectorMetrics
}

// NewMetrics makes the metrics for replica r in a registry of their own.
func NewMetrics(r *Replica) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_meta_calls_total", Help: "Meta service calls by method and gRPC code.",
		}, []string{"method", "code"}),
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_meta_call_seconds", Help: "Meta service call latency by method.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}, []string{"method"}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_meta_apply_seconds", Help: "Time from proposing a command to its result, on the leader.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}),
	}
	m.coll = NewCollectorMetrics()
	m.reg.MustRegister(m.coll.Collectors()...)
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_meta_raft_state", Help: "1 for the Raft state this replica is in.",
	}, []string{"state"})
	m.reg.MustRegister(m.calls, m.took, m.apply,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_meta_raft_applied_index", Help: "Last log index applied."},
			func() float64 { return float64(r.AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_meta_raft_term", Help: "Current Raft term."},
			func() float64 { return float64(r.raft.CurrentTerm()) }),
		stateCollector{state, r},
		clusterCollector{r},
	)
	r.applyObserver = m.apply
	return m
}

// stateCollector reports the replica's Raft state at scrape time.
type stateCollector struct {
	g *prometheus.GaugeVec
	r *Replica
}

func (s stateCollector) Describe(ch chan<- *prometheus.Desc) { s.g.Describe(ch) }

func (s stateCollector) Collect(ch chan<- prometheus.Metric) {
	now := s.r.raft.State()
	for _, st := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if st == now {
			v = 1
		}
		s.g.WithLabelValues(st.String()).Set(v)
	}
	s.g.Collect(ch)
}

// Register adds collectors of the process (such as the failure detector's)
// to the registry the replica's metrics are served from.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("meta metrics: %w", err)
		}
	}
	return nil
}

// Collector is the chunk collector's metrics (CollectorConfig.Metrics),
// served with the replica's.
func (m *Metrics) Collector() *CollectorMetrics { return m.coll }

// Gatherer is the registry, for a process's /metrics.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// clusterCollector reports the cluster map as this replica has applied it
// (a follower's may lag the leader's by the log it has not applied):
// its version, and each target's and chain member's state as a series
// of value 1 labelled with the state. Count targets by state with
// sum by (state) (sluice_mgmtd_target_state).
type clusterCollector struct{ r *Replica }

var (
	mapVersionDesc   = prometheus.NewDesc("sluice_mgmtd_map_version", "Version of the cluster map this replica has applied.", nil, nil)
	targetStateDesc  = prometheus.NewDesc("sluice_mgmtd_target_state", "1 for a target's state: serving, syncing or offline.", []string{"target", "node", "state"}, nil)
	targetFullDesc   = prometheus.NewDesc("sluice_mgmtd_target_full", "1 while a target's disk has no room for another chunk.", []string{"target"}, nil)
	chainVersionDesc = prometheus.NewDesc("sluice_mgmtd_chain_version", "A chain's version: it changes with every change of members, order or states.", []string{"chain"}, nil)
	chainMemberDesc  = prometheus.NewDesc("sluice_mgmtd_chain_target_state", "1 for a chain member's state in the chain.", []string{"chain", "target", "state"}, nil)
)

func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mapVersionDesc, targetStateDesc, targetFullDesc, chainVersionDesc, chainMemberDesc} {
		ch <- d
	}
}

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	m, err := c.r.ClusterMap()
	if err != nil {
		return
	}
	id := func(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
	state := func(s mgmtdpb.TargetState) string { return strings.ToLower(s.String()) }
	ch <- prometheus.MustNewConstMetric(mapVersionDesc, prometheus.GaugeValue, float64(m.Version))
	for _, t := range m.Targets {
		ch <- prometheus.MustNewConstMetric(targetStateDesc, prometheus.GaugeValue, 1, id(t.Id), t.Node, state(t.State))
		full := 0.0
		if t.Full {
			full = 1
		}
		ch <- prometheus.MustNewConstMetric(targetFullDesc, prometheus.GaugeValue, full, id(t.Id))
	}
	for _, chain := range m.Chains {
		ch <- prometheus.MustNewConstMetric(chainVersionDesc, prometheus.GaugeValue, float64(chain.Version), id(chain.Id))
		for i, t := range chain.Targets {
			if i < len(chain.States) {
				ch <- prometheus.MustNewConstMetric(chainMemberDesc, prometheus.GaugeValue, 1, id(chain.Id), id(t), state(chain.States[i]))
			}
		}
	}
}

// Interceptor counts and times every call.
func (m *Metrics) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		t0 := time.Now()
		resp, err := h(ctx, req)
		method := path.Base(info.FullMethod)
		m.took.WithLabelValues(method).Observe(time.Since(t0).Seconds())
		m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
		return resp, err
	}
}

// Handler serves the metrics for Prometheus (/metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
