package meta

import (
	"context"
	"net/http"
	"path"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Metrics are the meta service's Prometheus metrics: calls by method and
// outcome, their latency, Raft's state and progress, and how long commands
// take to commit and apply.
type Metrics struct {
	reg   *prometheus.Registry
	calls *prometheus.CounterVec
	took  *prometheus.HistogramVec
	apply prometheus.Histogram
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
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_meta_raft_state", Help: "1 for the Raft state this replica is in.",
	}, []string{"state"})
	m.reg.MustRegister(m.calls, m.took, m.apply,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_meta_raft_applied_index", Help: "Last log index applied."},
			func() float64 { return float64(r.AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_meta_raft_term", Help: "Current Raft term."},
			func() float64 { return float64(r.raft.CurrentTerm()) }),
		stateCollector{state, r},
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
