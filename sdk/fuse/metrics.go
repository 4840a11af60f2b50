package fuse

import "github.com/prometheus/client_golang/prometheus"

// Collectors are the mount's counters (Stats) and its block cache's size,
// for a process's /metrics; they read the same atomics Stats does, when
// scraped.
func (fs *FS) Collectors() []prometheus.Collector {
	counter := func(name, help string, v interface{ Load() int64 }) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	st := &fs.stats
	return []prometheus.Collector{
		counter("sluice_mount_readahead_windows_total", "Readahead windows fetched for sequential readers, each in one batched read.", &st.Windows),
		counter("sluice_mount_readahead_bytes_total", "Bytes the kernel got out of readahead windows.", &st.ReadaheadBytes),
		counter("sluice_mount_cache_fetches_total", "Blocks the mount's block cache fetched for readers that came back to them.", &st.CacheFetches),
		counter("sluice_mount_cache_hits_total", "Reads the block cache answered from memory.", &st.CacheHits),
		counter("sluice_mount_lookups_remembered_total", "Lookups answered from directories listed in bulk.", &st.NamesRemembered),
		counter("sluice_mount_dir_attrs_remembered_total", "Directories' attribute requests answered from memory (after this mount's creates in them).", &st.AttrsRemembered),
		counter("sluice_mount_listings_total", "Directories listed in bulk to answer runs of lookups.", &st.Listings),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_mount_cache_bytes", Help: "Bytes of file blocks the block cache holds."},
			func() float64 { return float64(fs.cache.held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_mount_cache_limit_bytes", Help: "The most the block cache holds (--cache; 0: no cache)."},
			func() float64 { return float64(fs.cache.limit()) }),
	}
}
