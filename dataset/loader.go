package dataset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"
)

// LoaderConfig says what a loader delivers.
type LoaderConfig struct {
	BatchSize int    // samples per batch (per rank and step)
	Shuffle   bool   // a fresh global permutation per epoch; else natural order
	Seed      uint64 // keys the permutation, with the epoch
	Epoch     int64  // the epoch to start with
	Rank      int    // this rank, of WorldSize (default 0 of 1)
	WorldSize int
	// Worker and Workers split a rank's steps among independent processes
	// (DataLoader workers): worker w takes steps w, w+Workers, ...
	Worker, Workers int
	DropLast        bool     // drop the epoch's last partial step instead of delivering it
	Columns         []string // projection; all columns when empty
	// IndexColumn, when set, adds an int64 column of that name holding
	// each row's sample index.
	IndexColumn string
	Readers     int // batches read in parallel (default 4)
	// Prefetch is the memory budget in bytes for batches in flight or held
	// (default 256 MiB, and at least three of the largest batches). A caller
	// that holds batches past it stalls the read-ahead, which logs a warning
	// every 10 s of waiting.
	Prefetch int64
	// SharedMemory puts the budget in a memfd (huge pages where reserved)
	// that another process can map (Loader.SharedMemory), so batches reach
	// it with no copy: a DataLoader worker's batches, read by the training
	// process.
	SharedMemory bool
	// Agent, when set, is a local agent's socket (sluice dev, agent,
	// mount): the loader reads through it, over shared-memory rings, into
	// the Iov it shares with the agent (a memfd, so SharedMemory holds
	// too), with no socket of its own in the data path.
	Agent string
}

// State is where a loader is: enough to continue exactly, with the same or
// another world size. It is the same on every rank after the same step.
type State struct {
	Version   int    `json:"version"`
	Dataset   string `json:"dataset_hash"`
	Seed      uint64 `json:"seed"`
	Shuffle   bool   `json:"shuffle"`
	Epoch     int64  `json:"epoch"`
	Consumed  int64  `json:"consumed"` // positions of the epoch's permutation taken by all ranks
	WorldSize int    `json:"world_size"`
	BatchSize int    `json:"batch_size"`
}

// Batch is one step's samples as an Arrow record batch whose buffers are
// the loader's registered read memory. Release it when done; until then
// its memory is never reused.
type Batch struct {
	arrow.RecordBatch
	Epoch   int64
	Step    int64 // this rank's step in the epoch's plan
	Partial bool  // the epoch's final, smaller step
	Bytes   int64 // sample bytes read for it
	state   State // after this step
}

// State is the loader state once this batch has been consumed.
func (b *Batch) State() State { return b.state }

// Loader delivers one rank's batches of a dataset, epoch after epoch,
// reading ahead in parallel within a memory budget.
type Loader struct {
	d      *Dataset
	cfg    LoaderConfig
	cols   []int
	schema *arrow.Schema
	a      *arena

	mu        sync.Mutex
	state     State // after the last batch delivered
	run       *run
	closeOnce sync.Once
}

// run is the read-ahead of one epoch from one starting state.
type run struct {
	cancel    context.CancelFunc
	out       chan chan result // in step order
	wg        sync.WaitGroup
	readAhead prometheus.Gauge // counts the slots in out

	// The next step, on its way to Next (the loader's caller owns these):
	// its slot, taken from out, and then its result (a zero result: the
	// epoch is over).
	slot chan result
	res  *result
}

type result struct {
	b   *Batch
	err error
}

// Loader returns a loader over d.
func (d *Dataset) Loader(cfg LoaderConfig) (*Loader, error) {
	if cfg.WorldSize == 0 {
		cfg.WorldSize = 1
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Readers <= 0 {
		cfg.Readers = 4
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 256 << 20
	}
	schema, err := d.LoaderSchema(cfg)
	if err != nil {
		return nil, err
	}
	cols, _ := d.m.project(cfg.Columns)
	if err := d.loaderOpened(); err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			d.loaderClosed()
		}
	}()
	// The budget holds at least three of the largest possible batches, so a
	// caller that keeps the previous batch while asking for the next never
	// waits forever.
	// The region is twice the budget: room for a caller that keeps
	// batches to grow into (arena.budget), touched only then.
	budget := arenaSize(int(max(cfg.Prefetch, 3*d.maxBatchBytes(cols, cfg))))
	var r region
	if cfg.Agent != "" {
		if r, err = newAgentRegion(cfg.Agent, 2*budget, d); err != nil {
			return nil, fmt.Errorf("loader: %w", err)
		}
	} else if r, err = newClientRegion(d.c, 2*budget, cfg.SharedMemory); err != nil {
		return nil, fmt.Errorf("loader: batch memory of %d bytes: %w", 2*budget, err)
	}
	a := newArena(r, 2*budget, budget, d.c)
	opened = true
	l := &Loader{d: d, cfg: cfg, cols: cols, schema: schema, a: a}
	l.state = State{Version: 1, Dataset: d.m.Hash, Seed: cfg.Seed, Shuffle: cfg.Shuffle, Epoch: cfg.Epoch,
		WorldSize: cfg.WorldSize, BatchSize: cfg.BatchSize}
	return l, nil
}

// LoaderSchema is the schema of the batches a loader over d with cfg
// delivers, or what is wrong with cfg for d (a rank or worker out of
// range, a bad batch size, an unknown column), without making a loader.
// Zero WorldSize and Workers mean 1, as for Loader.
func (d *Dataset) LoaderSchema(cfg LoaderConfig) (*arrow.Schema, error) {
	if cfg.WorldSize == 0 {
		cfg.WorldSize = 1
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Worker < 0 || cfg.Worker >= cfg.Workers {
		return nil, fmt.Errorf("loader: worker %d of %d out of range", cfg.Worker, cfg.Workers)
	}
	if _, err := newPlan(d.m.Samples, 0, cfg.WorldSize, cfg.Rank, cfg.BatchSize, cfg.DropLast); err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	schema, err := d.m.Schema(cfg.Columns...)
	if err != nil {
		return nil, err
	}
	if cfg.IndexColumn != "" {
		if schema.HasField(cfg.IndexColumn) {
			return nil, fmt.Errorf("loader: index column %q is already a column of %s", cfg.IndexColumn, d.m.Name)
		}
		fields := append(schema.Fields(), arrow.Field{Name: cfg.IndexColumn, Type: arrow.PrimitiveTypes.Int64})
		schema = arrow.NewSchema(fields, nil)
	}
	return schema, nil
}

// CheckState says why a loader over d cannot resume from s, or nil.
func (d *Dataset) CheckState(s State) error {
	if s.Version != 1 {
		return fmt.Errorf("resume: state version %d, this build reads 1", s.Version)
	}
	if s.Dataset != d.m.Hash {
		return fmt.Errorf("resume: the state is for another dataset (hash %.12s, %s has %.12s)", s.Dataset, d.m.Name, d.m.Hash)
	}
	if s.Consumed < 0 || s.Consumed > d.m.Samples {
		return fmt.Errorf("resume: %d consumed of %d samples", s.Consumed, d.m.Samples)
	}
	return nil
}

// maxBatchBytes bounds one batch's arena space: the size of a batch of the
// BatchSize largest samples.
func (d *Dataset) maxBatchBytes(cols []int, cfg LoaderConfig) int64 {
	idx := make([]int64, d.m.Samples)
	size := make([]int64, d.m.Samples)
	for i := range idx {
		idx[i], size[i] = int64(i), d.varBytes(int64(i), cols)
	}
	slices.SortFunc(idx, func(x, y int64) int { return cmp.Compare(size[y], size[x]) })
	return int64(d.batchSize(idx[:min(len(idx), cfg.BatchSize)], cols, cfg.IndexColumn != ""))
}

// SharedMemory is the memfd behind the loader's batches and the address
// it is mapped at here, for a loader made with SharedMemory (else fd is
// -1). A batch's buffers lie at their address minus base in the memfd.
// The descriptor is the loader's, valid until it closes.
func (l *Loader) SharedMemory() (fd int, base uintptr, size int) {
	return l.a.mem.fd(), l.a.base, l.a.n
}

// Schema is the schema of the batches.
func (l *Loader) Schema() *arrow.Schema { return l.schema }

// Steps is how many steps this rank takes in a whole epoch.
func (l *Loader) Steps() int64 {
	p, _ := newPlan(l.d.m.Samples, 0, l.cfg.WorldSize, l.cfg.Rank, l.cfg.BatchSize, l.cfg.DropLast)
	return p.steps()
}

// State is the state after the last batch delivered.
func (l *Loader) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Resume continues from s: the epoch and positions it records, with this
// loader's world size, rank, batch size and worker split. The seed and
// shuffle flag come from s.
func (l *Loader) Resume(s State) error {
	if err := l.d.CheckState(s); err != nil {
		return err
	}
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = State{Version: 1, Dataset: s.Dataset, Seed: s.Seed, Shuffle: s.Shuffle, Epoch: s.Epoch,
		Consumed: s.Consumed, WorldSize: l.cfg.WorldSize, BatchSize: l.cfg.BatchSize}
	return nil
}

// SetEpoch starts epoch e from its beginning.
func (l *Loader) SetEpoch(e int64) {
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state.Epoch, l.state.Consumed = e, 0
}

// Next returns the next batch of the epoch, or io.EOF after its last; call
// SetEpoch to go on. After an error the next call retries from the last
// batch delivered. Not for concurrent use (nor with Wait).
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	r := l.running()
	res, ok := l.ahead(r, ctx.Done())
	if !ok {
		// What it waited for stays with the run, for the next call.
		return nil, ctx.Err()
	}
	r.res = nil
	if res.err != nil {
		l.stop() // the next call retries from the last batch delivered
		return nil, res.err
	}
	if res.b == nil {
		return nil, io.EOF
	}
	l.mu.Lock()
	l.state = res.b.state
	l.mu.Unlock()
	m := &l.d.c.Metrics().Loader
	m.Batches.Inc()
	m.Samples.Add(float64(res.b.NumRows()))
	return res.b, nil
}

// Wait waits, at most d, until Next would return at once: the next batch
// is read, the epoch is over, or a read failed. It reports whether so.
// Nothing is taken: the state stays that after the last batch Next
// delivered. A caller that must stay interruptible (Python's main thread,
// where a signal is seen only between calls) waits in short calls of
// Wait and then calls Next, instead of blocking in Next. Not for
// concurrent use (nor with Next).
func (l *Loader) Wait(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, ok := l.ahead(l.running(), ctx.Done())
	return ok
}

// running is the read-ahead of the current epoch, started if it is not.
func (l *Loader) running() *run {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		l.run = l.start(l.state)
	}
	return l.run
}

// ahead returns the next step's result, keeping it in r (r.res) until
// Next takes it: a batch, an error, or neither at the epoch's end. It
// gives up when done fires first (ok false); what it was waiting for
// stays in r for the next call. The time it waits is the loader's stall.
func (l *Loader) ahead(r *run, done <-chan struct{}) (res result, ok bool) {
	if r.res != nil {
		return *r.res, true
	}
	t0 := time.Now()
	defer func() { l.d.c.Metrics().Loader.Stall.Add(time.Since(t0).Seconds()) }()
	if r.slot == nil {
		var open bool
		select {
		case r.slot, open = <-r.out:
		default:
			// Nothing read ahead: the next step may be waiting for memory
			// that only batches this caller keeps hold (see arena.budget).
			l.a.setHungry(true)
			select {
			case r.slot, open = <-r.out:
				l.a.setHungry(false)
			case <-done:
				l.a.setHungry(false)
				return result{}, false
			}
		}
		if !open {
			r.res = &result{}
			return *r.res, true
		}
		r.readAhead.Dec()
	}
	select {
	case res = <-r.slot:
		r.slot, r.res = nil, &res
		return res, true
	case <-done:
		return result{}, false
	}
}

// Each runs fn on every remaining batch of the current epoch, releasing
// each after fn returns (fn must not keep it). It stops at fn's first error.
func (l *Loader) Each(ctx context.Context, fn func(*Batch) error) error {
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = fn(b)
		b.Release()
		if err != nil {
			return err
		}
	}
}

// start reads ahead from state s: one goroutine reserves each step's
// memory in step order (so a later step can never starve an earlier one)
// and hands the reads to Readers goroutines.
func (l *Loader) start(s State) *run {
	ctx, cancel := context.WithCancel(context.Background())
	readAhead := l.d.c.Metrics().Loader.ReadAhead
	r := &run{cancel: cancel, out: make(chan chan result, 2*l.cfg.Readers), readAhead: readAhead}
	jobs := make(chan func(), l.cfg.Readers)
	for range l.cfg.Readers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for j := range jobs {
				j()
			}
		}()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(jobs)
		defer close(r.out)
		p, err := newPlan(l.d.m.Samples, s.Consumed, l.cfg.WorldSize, l.cfg.Rank, l.cfg.BatchSize, l.cfg.DropLast)
		if err != nil {
			r.fail(ctx, err)
			return
		}
		perm := NewPermutation(uint64(l.d.m.Samples), s.Seed, uint64(s.Epoch), s.Shuffle)
		for step := int64(l.cfg.Worker); step < p.steps(); step += int64(l.cfg.Workers) {
			lo, hi, partial := p.span(step)
			samples := make([]int64, hi-lo)
			for i := range samples {
				samples[i] = int64(perm.At(uint64(lo + int64(i))))
			}
			after := s
			after.Consumed = p.consumed(step + 1)
			j, err := l.d.prepare(ctx, l.a, l.schema, samples, l.cols, l.cfg.IndexColumn != "")
			if err != nil {
				r.fail(ctx, err)
				return
			}
			slot := make(chan result, 1)
			readAhead.Inc() // before Next can take it and count it down
			select {
			case r.out <- slot:
				l.a.fed()
			case <-ctx.Done():
				readAhead.Dec()
				j.discard()
				return
			}
			b := &Batch{Epoch: s.Epoch, Step: step, Partial: partial, Bytes: j.bytes, state: after}
			jobs <- func() {
				// A read runs to its end even when the run stops: cancelling
				// it would leave storage free to push into memory we reuse.
				// The client's OpTimeout bounds it (a dead cluster shows
				// as an error within it), or readTimeout when it has none.
				rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
				if l.d.c.OpTimeout() <= 0 {
					rctx, cancel = context.WithTimeout(rctx, readTimeout)
				}
				err := j.read(rctx)
				cancel()
				if err != nil {
					j.quarantine()
					slot <- result{err: err}
					return
				}
				b.RecordBatch = j.record()
				slot <- result{b: b}
			}
		}
	}()
	return r
}

// readTimeout bounds one batch's reads when the client has no OpTimeout.
const readTimeout = time.Minute

func (r *run) fail(ctx context.Context, err error) {
	slot := make(chan result, 1)
	slot <- result{err: fmt.Errorf("loader: %w", err)}
	r.readAhead.Inc()
	select {
	case r.out <- slot:
	case <-ctx.Done():
		r.readAhead.Dec()
	}
}

// stop ends the read-ahead and releases batches read but not delivered.
func (l *Loader) stop() {
	l.mu.Lock()
	r := l.run
	l.run = nil
	l.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	if r.res != nil && r.res.b != nil {
		r.res.b.Release()
	}
	if r.slot != nil {
		drop(r.slot)
	}
	for slot := range r.out {
		r.readAhead.Dec()
		drop(slot)
	}
	r.wg.Wait()
}

// drop waits for a slot's batch and releases it.
func drop(slot chan result) {
	if res := <-slot; res.b != nil {
		res.b.Release()
	}
}

// Close stops the loader. Batches already delivered stay valid until
// released; the memory goes when the last one is.
func (l *Loader) Close() error {
	l.closeOnce.Do(func() {
		l.stop()
		l.a.close()
		l.d.loaderClosed()
	})
	return nil
}
