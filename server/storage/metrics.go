package storage

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// metrics are a node's Prometheus metrics, labelled by target and chain
// (bounded: a node has few targets, a cluster few chains), never by chunk
// or client. Per-target counters are looked up once, not per request.
type metrics struct {
	targets     map[routing.TargetID]*targetMetrics
	readSeconds prometheus.Histogram
	resyncs     prometheus.Gauge
	resyncBytes prometheus.Counter
	pending     *prometheus.GaugeVec // updates in flight by chain
	// pendingBy caches pending's gauge per chain (routing.ChainID ->
	// prometheus.Gauge), so an update formats no label.
	pendingBy sync.Map
}

type targetMetrics struct {
	reads, readBytes, writes, writeBytes, crcFailures prometheus.Counter
	updateSeconds                                     prometheus.Observer
}

// latencyBuckets run from 100 µs to about 26 s.
var latencyBuckets = prometheus.ExponentialBuckets(1e-4, 4, 10)

func newMetrics(reg prometheus.Registerer, targets map[routing.TargetID]*chunkstore.Engine) *metrics {
	label := []string{"target"}
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_storage_reads_total", Help: "Read entries served, by target."}, label)
	readBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_storage_read_bytes_total", Help: "Bytes pushed to readers, by target."}, label)
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_storage_writes_total", Help: "Updates stored (at every chain position), by target."}, label)
	writeBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_storage_write_bytes_total", Help: "Update bytes stored, by target."}, label)
	crc := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_storage_crc_failures_total", Help: "Reads and updates refused because bytes failed their CRC32C, by target."}, label)
	upd := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_storage_update_seconds", Help: "Time to apply an update at a target, its successors included.", Buckets: latencyBuckets}, label)
	m := &metrics{
		targets: map[routing.TargetID]*targetMetrics{},
		readSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_storage_read_seconds",
			Help: "Time to serve a read request (a batch of entries), push included.", Buckets: latencyBuckets}),
		resyncs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_storage_resyncs_in_progress", Help: "Resyncs this node is running to syncing successors."}),
		resyncBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_storage_resync_bytes_total",
			Help: "Chunk bytes this node sent to syncing successors."}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_storage_updates_pending",
			Help: "Updates in flight at this node (pulled, not yet committed), by chain."}, []string{"chain"}),
	}
	for id := range targets {
		t := strconv.FormatUint(uint64(id), 10)
		m.targets[id] = &targetMetrics{reads: reads.WithLabelValues(t), readBytes: readBytes.WithLabelValues(t),
			writes: writes.WithLabelValues(t), writeBytes: writeBytes.WithLabelValues(t),
			crcFailures: crc.WithLabelValues(t), updateSeconds: upd.WithLabelValues(t)}
	}
	if reg != nil {
		reg.MustRegister(reads, readBytes, writes, writeBytes, crc, upd, m.readSeconds, m.resyncs, m.resyncBytes, m.pending, diskCollector(targets))
	}
	return m
}

// target is id's metrics; nil for a target the node does not have (a
// request for it is refused anyway).
func (m *metrics) target(id uint32) *targetMetrics { return m.targets[routing.TargetID(id)] }

// updated counts an update applied at its target (err nil) or refused for
// a bad CRC.
func (m *metrics) updated(req *storagepb.UpdateRequest, err error, t0 time.Time) {
	t := m.target(req.Target)
	switch {
	case t == nil:
	case err == nil:
		t.writes.Inc()
		t.writeBytes.Add(float64(req.Length))
		t.updateSeconds.Observe(since(t0))
	case errors.Is(err, chunkio.ErrChecksum):
		t.crcFailures.Inc()
	}
}

// pendingOf is chain's gauge of updates in flight.
func (m *metrics) pendingOf(chain uint32) prometheus.Gauge {
	id := routing.ChainID(chain)
	if g, ok := m.pendingBy.Load(id); ok {
		return g.(prometheus.Gauge)
	}
	g, _ := m.pendingBy.LoadOrStore(id, m.pending.WithLabelValues(strconv.FormatUint(uint64(chain), 10)))
	return g.(prometheus.Gauge)
}

func since(t0 time.Time) float64 { return time.Since(t0).Seconds() }

// diskCollector reports each target's chunk count and disk space when
// scraped: statfs and a walk of the chunk records' keys, no chunk files.
type diskCollector map[routing.TargetID]*chunkstore.Engine

var (
	chunksDesc    = prometheus.NewDesc("sluice_storage_chunks", "Chunks the target holds.", []string{"target"}, nil)
	diskTotalDesc = prometheus.NewDesc("sluice_storage_disk_total_bytes", "Size of the target's file system.", []string{"target"}, nil)
	diskFreeDesc  = prometheus.NewDesc("sluice_storage_disk_free_bytes", "Free space on the target's file system for the target.", []string{"target"}, nil)
)

func (d diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- chunksDesc
	ch <- diskTotalDesc
	ch <- diskFreeDesc
}

func (d diskCollector) Collect(ch chan<- prometheus.Metric) {
	for id, e := range d {
		t := strconv.FormatUint(uint64(id), 10)
		if n, err := e.ChunkCount(); err == nil {
			ch <- prometheus.MustNewConstMetric(chunksDesc, prometheus.GaugeValue, float64(n), t)
		}
		if total, free, err := e.Space(); err == nil {
			ch <- prometheus.MustNewConstMetric(diskTotalDesc, prometheus.GaugeValue, float64(total), t)
			ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(free), t)
		}
	}
}
