package sdk

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicefs/sluice/chunkio"
)

// Metrics are a client's Prometheus metrics, in a registry the client owns
// (no global registry): what it read and wrote, its retries, its errors by
// kind, and the dataset loaders' counters (Loader). A process serves them
// on its /metrics (Gatherer); Python reads them as a dict (Snapshot).
type Metrics struct {
	reg        *prometheus.Registry
	readBytes  prometheus.Counter
	reads      prometheus.Counter
	writeBytes prometheus.Counter
	writes     prometheus.Counter
	retries    prometheus.Counter
	errs       *prometheus.CounterVec
	// Loader is where the client's dataset loaders count.
	Loader LoaderMetrics
}

// LoaderMetrics are the dataset loaders' counters, summed over the
// client's loaders. Stall is what to watch: the seconds the training loop
// spent blocked in Loader.Next waiting for a batch (the GPU waiting on
// data); MemoryWait is the seconds the read-ahead spent waiting for batch
// memory to be released (the budget is full of batches the caller holds:
// the loader is ahead, not behind).
type LoaderMetrics struct {
	Batches, Samples  prometheus.Counter
	Stall, MemoryWait prometheus.Counter
	// ReadAhead is how many batches are being read or wait, read, for
	// Next.
	ReadAhead prometheus.Gauge
}

// Error kinds counted in sluice_client_errors_total{kind}: a fixed set.
const (
	kindTimeout     = "timeout"
	kindCanceled    = "canceled"
	kindUnavailable = "unavailable"
	kindChecksum    = "checksum"
	kindNoSpace     = "no_space"
	kindNotFound    = "not_found"
	kindOther       = "other"
)

func newMetrics() *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		reg:        prometheus.NewRegistry(),
		readBytes:  c("sluice_client_read_bytes_total", "File bytes read (ReadAt, ReadBatch, the agent's reads)."),
		reads:      c("sluice_client_reads_total", "Ranges read: one per ReadAt call or batch op."),
		writeBytes: c("sluice_client_write_bytes_total", "File bytes written."),
		writes:     c("sluice_client_writes_total", "Ranges written: one per WriteAt call or batch op."),
		retries:    c("sluice_client_retries_total", "Storage attempts retried on new routing (failover, stale chain version, unavailable)."),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_client_errors_total",
			Help: "Reads and writes that failed after retries, by kind: timeout, canceled, unavailable, checksum, no_space, not_found, other."}, []string{"kind"}),
		Loader: LoaderMetrics{
			Batches:    c("sluice_loader_batches_total", "Batches the dataset loaders delivered."),
			Samples:    c("sluice_loader_samples_total", "Samples in those batches."),
			Stall:      c("sluice_loader_stall_seconds_total", "Seconds the training loop waited in Loader.Next for a batch: the time it was starved of data."),
			MemoryWait: c("sluice_loader_memory_wait_seconds_total", "Seconds the read-ahead waited for batch memory held by batches not yet released."),
			ReadAhead:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_loader_read_ahead_batches", Help: "Batches being read or read and waiting for Next."}),
		},
	}
	for _, k := range []string{kindTimeout, kindCanceled, kindUnavailable, kindChecksum, kindNoSpace, kindNotFound, kindOther} {
		m.errs.WithLabelValues(k) // every kind reads 0 from the start
	}
	l := m.Loader
	m.reg.MustRegister(m.readBytes, m.reads, m.writeBytes, m.writes, m.retries, m.errs, l.Batches, l.Samples, l.Stall, l.MemoryWait, l.ReadAhead)
	return m
}

// Gatherer is the client's registry, for a process's /metrics.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Snapshot is every metric's current value by name, labels in braces as
// Prometheus writes them (`sluice_client_errors_total{kind="timeout"}`).
func (m *Metrics) Snapshot() (map[string]float64, error) {
	mfs, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather client metrics: %w", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			name := mf.GetName() + labelString(s.GetLabel())
			switch {
			case s.Counter != nil:
				out[name] = s.Counter.GetValue()
			case s.Gauge != nil:
				out[name] = s.Gauge.GetValue()
			}
		}
	}
	return out, nil
}

func labelString(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// read counts a read of n bytes, or its failure.
func (m *Metrics) read(n int, err error) { m.count(m.reads, m.readBytes, n, err) }

// wrote counts a write of n bytes, or its failure.
func (m *Metrics) wrote(n int, err error) { m.count(m.writes, m.writeBytes, n, err) }

func (m *Metrics) count(ranges, bytes prometheus.Counter, n int, err error) {
	if err != nil {
		m.failed(err)
		return
	}
	ranges.Inc()
	bytes.Add(float64(n))
}

func (m *Metrics) failed(err error) { m.errs.WithLabelValues(errorKind(err)).Inc() }

// errorKind sorts an error into one of the kinds above.
func errorKind(err error) string {
	switch {
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case errors.Is(err, chunkio.ErrUnavailable):
		return kindUnavailable
	case errors.Is(err, chunkio.ErrChecksum):
		return kindChecksum
	case errors.Is(err, chunkio.ErrNoSpace):
		return kindNoSpace
	case errors.Is(err, chunkio.ErrNotFound):
		return kindNotFound
	}
	return kindOther
}
