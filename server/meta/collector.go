package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// ChunkRemover deletes a file's chunks from storage (every replica of the
// chains its layout names); the storage client implements it.
type ChunkRemover interface {
	// RemoveChunks removes chunks [from, to) of file f. A chunk that does
	// not exist is no error.
	RemoveChunks(ctx context.Context, f *metapb.Inode, from, to uint64) error
}

// ChunksOf is how many chunks file f may have on storage: those below its
// written mark (Written), whatever its length says. A file truncated to a
// huge length and never written has none.
func ChunksOf(f *metapb.Inode) uint64 {
	cs := uint64(f.GetLayout().GetChunkSize())
	if cs == 0 {
		return 0
	}
	// A record from before the written mark counts its length; no chunk
	// lies past the largest length a file may have.
	end := min(Written(f), fsmeta.MaxFileSize)
	return (end + cs - 1) / cs
}

// CollectorConfig configures a Collector. Zero fields take the defaults.
type CollectorConfig struct {
	// Delay is how long an unlinked file's chunks stay before they are
	// removed (default 1 minute).
	Delay time.Duration
	// Workers is how many files are collected at once (default 8).
	Workers int
	// FileTimeout bounds one attempt at one file (default 1 minute). A file
	// whose storage does not answer is given up for the time being and
	// tried again in a later round, from the chunk it had got to: it holds
	// a worker no longer than this, and the other workers go on meanwhile.
	FileTimeout time.Duration
	// ElectionWait is how long a new leader collects nothing (default
	// fsmeta.ReadLease): read leases renewed with the old leader are not
	// known to it yet. Negative: no wait, for a test cluster whose clients
	// all started with it.
	ElectionWait time.Duration
	// ClientLease is how long a client with write sessions open may go
	// without renewing (KeepOpen) before the collector takes it for dead and
	// ends its sessions (default fsmeta.ReadLease; clients renew every third
	// of that). Shorter only in tests.
	ClientLease time.Duration
	// Metrics counts the collector's work (NewMetrics makes them with the
	// replica's); nil counts into metrics registered nowhere.
	Metrics *CollectorMetrics
	Logger  *slog.Logger
}

// removeBatch is how many chunks the collector asks storage to remove
// before it records how far it got.
const removeBatch = 64

// Collector runs on the leader and removes the chunks of files whose last
// link went at least Delay ago and that no write session or read lease
// holds open, then forgets them through the log. It removes only the chunks
// a file may have (ChunksOf), several files at once, and a file that
// fails or hangs never holds up the others.
type Collector struct {
	r       *Replica
	remover ChunkRemover
	cfg     CollectorConfig
	log     *slog.Logger
	m       *CollectorMetrics
	slots   chan struct{} // one per worker busy

	mu       sync.Mutex
	busy     map[uint64]bool   // files a worker is collecting
	progress map[uint64]uint64 // the next chunk to remove of files an attempt left unfinished
	wg       sync.WaitGroup    // the workers
	// leaderSince is when this replica last became leader (Run): for
	// ElectionWait after that it collects nothing.
	leaderSince time.Time
	lastEnded   time.Time // when Run last looked for dead writers
}

// NewCollector makes a collector over r.
func NewCollector(r *Replica, remover ChunkRemover, cfg CollectorConfig) *Collector {
	if cfg.Delay <= 0 {
		cfg.Delay = time.Minute
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.FileTimeout <= 0 {
		cfg.FileTimeout = time.Minute
	}
	if cfg.ElectionWait == 0 {
		cfg.ElectionWait = fsmeta.ReadLease
	}
	if cfg.ClientLease <= 0 {
		cfg.ClientLease = fsmeta.ReadLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewCollectorMetrics()
	}
	return &Collector{r: r, remover: remover, cfg: cfg, log: cfg.Logger, m: cfg.Metrics,
		slots: make(chan struct{}, cfg.Workers), busy: map[uint64]bool{}, progress: map[uint64]uint64{}}
}

// Run starts a round every interval until ctx ends, then waits for its
// workers. A round starts the files that are due on free workers and does
// not wait for them: a file still being collected is skipped by the next
// round, and files left over when every worker is busy wait for the next.
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	defer c.wg.Wait()
	tick.Every(ctx, interval, func() {
		if !c.r.IsLeader() {
			c.leaderSince = time.Time{}
			c.m.pending.Set(0) // the leader's to count
			return
		}
		if c.leaderSince.IsZero() {
			c.leaderSince = time.Now()
		}
		if time.Since(c.leaderSince) < c.cfg.ElectionWait {
			return
		}
		if now := time.Now(); now.Sub(c.lastEnded) >= c.cfg.ClientLease/10 {
			c.lastEnded = now
			if _, err := c.EndDeadWriters(ctx, now); err != nil {
				c.m.errors.Inc()
				c.log.Warn("chunk collector: cannot end the write sessions of dead clients", "err", err)
			}
		}
		if _, err := c.dispatch(ctx, time.Now(), false); err != nil {
			c.m.errors.Inc()
			c.log.Warn("chunk collector: cannot read the queue", "err", err)
		}
	})
}

// Collect does one round over the whole queue as of now, waits for the
// files it started, and returns how many it collected. A file it cannot
// collect yet (too recent, open, being collected by Run, storage failing)
// is skipped, not allowed to hold up the rest; the failures are returned
// after the round.
func (c *Collector) Collect(ctx context.Context, now time.Time) (int, error) {
	started, err := c.dispatch(ctx, now, true)
	done := 0
	for _, a := range started {
		<-a.done
		if a.err != nil {
			err = errors.Join(err, a.err)
			continue
		}
		done++
	}
	return done, err
}

// EndDeadWriters ends the write sessions of every client that has not
// renewed with this leader for ClientLease and opened none of them within
// it (PruneClient, through the log), and returns how many clients it
// ended. A writer that crashed, or lost the cluster for longer than the
// lease, would otherwise hold its files open for good: a file it held
// and that was unlinked would never be collected. What such a writer wrote
// past its last close or fsync is not in the file's written mark, so the
// collector does not remove those chunks. Run calls it once the leader has
// waited ElectionWait (every live client has renewed with it by then).
func (c *Collector) EndDeadWriters(ctx context.Context, now time.Time) (int, error) {
	clients, err := c.r.Namespace().SessionClients()
	if err != nil {
		return 0, fmt.Errorf("write sessions: %w", err)
	}
	ended := 0
	for client, opened := range clients {
		last := time.Unix(0, opened)
		if heard := c.r.locks.lastHeard(client); heard.After(last) {
			last = heard
		}
		if now.Sub(last) < c.cfg.ClientLease {
			continue
		}
		res, err := c.r.Do(ctx, &metapb.Command{NowNs: now.UnixNano(), Op: &metapb.Command_PruneClient{PruneClient: client}})
		if err == nil && res.Code != 0 {
			err = errors.New(res.Error)
		}
		if err != nil {
			return ended, fmt.Errorf("end the write sessions of client %d: %w", client, err)
		}
		ended++
		c.m.deadWriters.Inc()
		c.log.Info("chunk collector: ended the write sessions of a client not heard from for a lease",
			"client", client, "last_heard", last, "lease", c.cfg.ClientLease)
	}
	return ended, nil
}

// attempt is one worker's go at one file.
type attempt struct {
	done chan struct{} // closed when err is set
	err  error
}

// dispatch walks the queue and starts a worker on each file that is due,
// not held open and not being collected. When every worker is busy it
// waits for one if wait is set, else leaves the rest of the queue to the
// next round.
func (c *Collector) dispatch(ctx context.Context, now time.Time, wait bool) ([]*attempt, error) {
	c.m.rounds.Inc()
	var started []*attempt
	queued := 0
	for after := uint64(0); ; {
		files, err := c.r.Namespace().GarbageAfter(after, 256)
		if err != nil {
			return started, fmt.Errorf("chunk collector: read the queue after inode %d: %w", after, err)
		}
		if len(files) == 0 {
			c.m.pending.Set(float64(queued))
			return started, nil
		}
		queued += len(files)
		for _, f := range files {
			after = f.Ino
			if now.Sub(time.Unix(0, f.CtimeNs)) < c.cfg.Delay || c.isBusy(f.Ino) {
				continue
			}
			if open, err := c.r.Namespace().HasSessions(f.Ino); err != nil || open || c.r.readers.held(f.Ino, now) {
				continue
			}
			if !c.acquire(ctx, wait) {
				c.m.pending.Set(float64(queued))
				return started, nil
			}
			a := &attempt{done: make(chan struct{})}
			started = append(started, a)
			c.mu.Lock()
			c.busy[f.Ino] = true
			c.mu.Unlock()
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				a.err = c.collect(ctx, f)
				c.mu.Lock()
				delete(c.busy, f.Ino)
				c.mu.Unlock()
				<-c.slots
				close(a.done)
			}()
		}
	}
}

func (c *Collector) isBusy(ino uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy[ino]
}

// acquire takes a worker slot: at once, or, with wait, once one is free.
func (c *Collector) acquire(ctx context.Context, wait bool) bool {
	if !wait {
		select {
		case c.slots <- struct{}{}:
			return true
		default:
			return false
		}
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// collect removes file f's chunks, from where an earlier attempt got, and
// forgets the file through the log.
func (c *Collector) collect(ctx context.Context, f *metapb.Inode) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FileTimeout)
	defer cancel()
	c.m.attempts.Inc()
	t0 := time.Now()
	n := ChunksOf(f)
	c.mu.Lock()
	from := c.progress[f.Ino]
	c.mu.Unlock()
	fail := func(err error) error {
		c.m.errors.Inc()
		c.mu.Lock()
		c.progress[f.Ino] = from
		c.mu.Unlock()
		c.log.Warn("chunk collector: cannot collect a file yet; it is tried again later",
			"inode", f.Ino, "chunks", n, "removed", from, "err", err)
		return fmt.Errorf("collect inode %d (chunk %d of %d): %w", f.Ino, from, n, err)
	}
	for from < n {
		to := min(n, from+removeBatch)
		if err := c.remover.RemoveChunks(ctx, f, from, to); err != nil {
			return fail(err)
		}
		c.m.chunks.Add(float64(to - from))
		from = to
	}
	res, err := c.r.Do(ctx, &metapb.Command{Op: &metapb.Command_Collected{Collected: f.Ino}})
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("forget inode %d: %s", f.Ino, res.Error)
	}
	if err != nil {
		return fail(err)
	}
	c.mu.Lock()
	delete(c.progress, f.Ino)
	c.mu.Unlock()
	c.m.files.Inc()
	c.log.Debug("chunk collector: file collected", "inode", f.Ino, "chunks", n, "took", time.Since(t0))
	return nil
}

// CollectorMetrics count the collector's work: sluice_meta_collector_*.
type CollectorMetrics struct {
	rounds, attempts, files, chunks, errors, deadWriters prometheus.Counter
	pending                                              prometheus.Gauge
}

// NewCollectorMetrics makes the collector's metrics (register them with
// Collectors).
func NewCollectorMetrics() *CollectorMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_meta_collector_" + name, Help: help})
	}
	return &CollectorMetrics{
		rounds:   counter("rounds_total", "Walks of the collector's queue (on the leader)."),
		attempts: counter("attempts_total", "Files the collector started to remove."),
		files:    counter("files_total", "Files whose chunks the collector removed and that it forgot."),
		chunks:   counter("chunks_removed_total", "Chunks the collector asked storage to remove."),
		errors:   counter("errors_total", "Failed attempts at a file, and failed walks of the queue."),
		deadWriters: counter("dead_writers_total",
			"Clients whose write sessions the collector ended: not heard from for a lease (crashed or cut off)."),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_meta_collector_pending",
			Help: "Unlinked files waiting for the collector at its last walk of the queue."}),
	}
}

// Collectors are the metrics, to register.
func (m *CollectorMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.rounds, m.attempts, m.files, m.chunks, m.errors, m.deadWriters, m.pending}
}

// StorageRemover removes a file's chunks from storage: chunk i lives on
// ChunkChain of the file's chain table, per the cluster map.
type StorageRemover struct {
	Client *chunkio.Client
	Map    func() (*mgmtdpb.ClusterMap, error)
	// Parallel is how many chunks of one file are removed at once
	// (default 8).
	Parallel int
}

// RemoveChunks removes chunks [from, to) of f, several at once.
func (s StorageRemover) RemoveChunks(ctx context.Context, f *metapb.Inode, from, to uint64) error {
	l := f.GetLayout()
	m, err := s.Map()
	if err != nil {
		return err
	}
	var chains []uint32
	for _, t := range m.Tables {
		if t.Id == l.GetChainTable() {
			chains = t.Chains
		}
	}
	if len(chains) == 0 {
		return fmt.Errorf("inode %d: no chain table %d", f.Ino, l.GetChainTable())
	}
	parallel := s.Parallel
	if parallel <= 0 {
		parallel = 8
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, parallel)
	)
	for i := from; i < to && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			chain := fsmeta.ChunkChain(chains, l, f.Ino, i)
			if err := s.Client.Remove(ctx, routing.ChainID(chain), chunkio.ID{Inode: f.Ino, Index: uint32(i)}); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return first
}
