package nemesis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/sdk"
)

// WorkloadConfig shapes the workload. Zero fields take the defaults in
// brackets.
type WorkloadConfig struct {
	Cluster, Token string
	Clients        int           // SDK clients, each its own connection [3]
	Workers        int           // goroutines per client [2]
	Files          int           // files [3]
	SmallFiles     int           // files of one write-once key each, kept inline [4]
	OpTimeout      time.Duration // one op's deadline [6 s]
	Think          time.Duration // pause between a worker's ops [5 ms]
	Seed           uint64
	Logger         *slog.Logger // the SDK clients' log
}

// Workload is the register workload: keys at fixed offsets of a few
// files, some written once at setup and only read after, the others
// rewritten all the time. The keys of a file lie in several of its chunks
// (so on several chains) and several in one chunk; the last file's keys
// are all write-once, so some chunks are only ever read after setup.
type Workload struct {
	cfg     WorkloadConfig
	h       *History
	Keys    []Key
	clients []*sdk.Client
	files   [][]*sdk.File // [client][file], open for writing
	paths   []string
	small   []string // the small files' paths
}

// Chunk indexes and blocks in a chunk (of 16 at 64 KiB) that hold keys;
// the last key of a file ends the file.
var (
	keyChunks = []int64{0, 1, 2, 3, 5, 7}
	keyBlocks = []int64{0, 7, 15}
)

// NewWorkload connects the clients, creates the files and writes every
// key once (the setup phase), then opens the files for writing on every
// client.
func NewWorkload(ctx context.Context, cfg WorkloadConfig, chunkSize int, h *History) (*Workload, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 3
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Files <= 0 {
		cfg.Files = 3
	}
	if cfg.SmallFiles <= 0 {
		cfg.SmallFiles = 4
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 6 * time.Second
	}
	if cfg.Think <= 0 {
		cfg.Think = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Workload{cfg: cfg, h: h}
	for f := 0; f < cfg.Files; f++ {
		w.paths = append(w.paths, fmt.Sprintf("/nemesis-%d", f))
		for _, c := range keyChunks {
			for _, b := range keyBlocks {
				k := Key{ID: len(w.Keys), File: f, Off: c*int64(chunkSize) + b*BlockSize}
				k.WriteOnce = f == cfg.Files-1 || b == 7
				w.Keys = append(w.Keys, k)
			}
		}
	}
	for s := 0; s < cfg.SmallFiles; s++ {
		w.small = append(w.small, fmt.Sprintf("/nemesis-small-%d", s))
		w.Keys = append(w.Keys, Key{ID: len(w.Keys), File: s, WriteOnce: true, Inline: true})
	}
	for i := 0; i < cfg.Clients; i++ {
		cl, err := sdk.Connect(ctx, sdk.Config{Cluster: cfg.Cluster, Token: cfg.Token, Logger: cfg.Logger})
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("workload: connect client %d: %w", i, err)
		}
		w.clients = append(w.clients, cl)
	}
	if err := w.setup(ctx); err != nil {
		w.Close()
		return nil, err
	}
	for _, cl := range w.clients {
		var fs []*sdk.File
		for _, p := range w.paths {
			f, err := cl.OpenFile(ctx, p, true)
			if err != nil {
				w.Close()
				return nil, fmt.Errorf("workload: open %s: %w", p, err)
			}
			fs = append(fs, f)
		}
		w.files = append(w.files, fs)
	}
	return w, nil
}

// setupWriter is the writer id of the setup phase; workers are 2 and up.
const setupWriter = 1

// setup creates the files and writes every key, retrying a key until a
// write of it is acknowledged.
func (w *Workload) setup(ctx context.Context) error {
	cl := w.clients[0]
	var counter uint64
	for fi, p := range w.paths {
		var f *sdk.File
		var err error
		for f == nil {
			if f, err = cl.Create(ctx, p); err != nil && !errors.Is(err, sdk.ErrExist) {
				if ctx.Err() != nil {
					return fmt.Errorf("workload: create %s: %w", p, err)
				}
				time.Sleep(200 * time.Millisecond) // the chain table may not exist yet
				f = nil
			} else if err != nil {
				return fmt.Errorf("workload: create %s: %w", p, err)
			}
		}
		for _, k := range w.Keys {
			if k.File != fi || k.Inline {
				continue
			}
			for {
				counter++
				op := w.write(ctx, cl, f, k, 0, ValueID(setupWriter, counter), "setup")
				if op.Status == StatusOK {
					break
				}
				if ctx.Err() != nil {
					return fmt.Errorf("workload: setup write of key %d: %s", k.ID, op.Err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("workload: close %s: %w", p, err)
		}
	}
	for _, k := range w.Keys {
		if !k.Inline {
			continue
		}
		for {
			counter++
			if op := w.writeSmall(ctx, cl, k, ValueID(setupWriter, counter)); op.Status == StatusOK {
				break
			} else if ctx.Err() != nil {
				return fmt.Errorf("workload: setup write of key %d: %s", k.ID, op.Err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The point of these keys: their bytes live in the metadata
		// service, which the faults on meta replicas then put to the test.
		f, err := cl.Open(ctx, w.small[k.File])
		if err != nil {
			return fmt.Errorf("workload: open %s: %w", w.small[k.File], err)
		}
		inline := f.Inline()
		f.Close()
		if !inline {
			return fmt.Errorf("workload: %s (%d bytes) is not kept inline", w.small[k.File], BlockSize)
		}
	}
	return nil
}

// writeSmall writes value v as the whole of key k's small file (made if
// it is not there), recording the op: acknowledged once the close that
// hands the bytes to the metadata service returns.
func (w *Workload) writeSmall(ctx context.Context, cl *sdk.Client, k Key, v uint64) Op {
	op := Op{Key: k.ID, Kind: OpWrite, Value: v, Phase: "setup", Status: StatusInfo}
	b := make([]byte, BlockSize)
	EncodeValue(b, k.ID, v)
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	op.Call = w.h.Now()
	p := w.small[k.File]
	f, err := cl.Create(octx, p)
	if errors.Is(err, sdk.ErrExist) { // a try that failed after it made the file
		f, err = cl.OpenFile(octx, p, true)
	}
	if err == nil {
		_, err = f.WriteAtContext(octx, b, 0)
		err = errors.Join(err, f.Close())
	}
	op.Return = w.h.Now()
	return w.wrote(op, err)
}

// readSmall reads key k by opening its small file, recording the op.
func (w *Workload) readSmall(ctx context.Context, cl *sdk.Client, k Key, client int, phase string) Op {
	op := Op{Key: k.ID, Client: client, Kind: OpRead, Phase: phase, Status: StatusFail}
	b := make([]byte, BlockSize)
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	op.Call = w.h.Now()
	f, err := cl.Open(octx, w.small[k.File])
	n := 0
	if err == nil {
		n, err = f.ReadAtContext(octx, b, 0)
		f.Close()
	}
	op.Return = w.h.Now()
	if errors.Is(err, io.EOF) && n == BlockSize {
		err = nil
	}
	return w.readOf(op, b, err)
}

// readKey reads key k through client ci, recording the op.
func (w *Workload) readKey(ctx context.Context, ci int, k Key, client int, phase string) Op {
	if k.Inline {
		return w.readSmall(ctx, w.clients[ci], k, client, phase)
	}
	return w.read(ctx, w.clients[ci], w.files[ci][k.File], k, client, phase)
}

// write writes value v to key k through f, recording the op. Each op has
// a buffer of its own, released before the op is recorded: a storage node
// that acts late on a given-up attempt finds the memory gone rather than
// another op's bytes.
func (w *Workload) write(ctx context.Context, cl *sdk.Client, f *sdk.File, k Key, client int, v uint64, phase string) Op {
	op := Op{Key: k.ID, Client: client, Kind: OpWrite, Value: v, Phase: phase, Status: StatusInfo}
	buf, err := cl.NewBuffer(BlockSize)
	if err != nil {
		op.Call, op.Return, op.Err = w.h.Now(), w.h.Now(), err.Error()
		w.h.Add(op)
		return op
	}
	EncodeValue(buf.B, k.ID, v)
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	op.Call = w.h.Now()
	err = cl.WriteBatch(octx, []sdk.WriteOp{{File: f, Off: k.Off, N: BlockSize, Buf: buf}})
	op.Return = w.h.Now()
	cancel()
	buf.Release()
	return w.wrote(op, err)
}

// wrote records write op, acknowledged unless err.
func (w *Workload) wrote(op Op, err error) Op {
	if err == nil {
		op.Status = StatusOK
	} else {
		op.Err = err.Error()
	}
	w.h.Add(op)
	return op
}

// readOf records read op of block b (the value read, or what is wrong
// with it), failed if err.
func (w *Workload) readOf(op Op, b []byte, err error) Op {
	if err != nil {
		op.Err = err.Error()
	} else {
		v, derr := DecodeValue(b, op.Key)
		op.Value = v
		if derr != nil {
			op.Status, op.Err = StatusCorrupt, derr.Error()
		} else {
			op.Status = StatusOK
		}
	}
	w.h.Add(op)
	return op
}

// read reads key k through f, recording the op.
func (w *Workload) read(ctx context.Context, cl *sdk.Client, f *sdk.File, k Key, client int, phase string) Op {
	op := Op{Key: k.ID, Client: client, Kind: OpRead, Phase: phase, Status: StatusFail}
	buf, err := cl.NewBuffer(BlockSize)
	if err != nil {
		op.Call, op.Return, op.Err = w.h.Now(), w.h.Now(), err.Error()
		w.h.Add(op)
		return op
	}
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	op.Call = w.h.Now()
	err = cl.ReadBatch(octx, []sdk.ReadOp{{File: f, Off: k.Off, N: BlockSize, Buf: buf}})
	op.Return = w.h.Now()
	cancel()
	op = w.readOf(op, buf.B, err)
	buf.Release()
	return op
}

// Run runs the workers until ctx ends.
func (w *Workload) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for ci, cl := range w.clients {
		for wi := 0; wi < w.cfg.Workers; wi++ {
			writer := uint32(2 + ci*w.cfg.Workers + wi)
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(writer)))
			wg.Go(func() {
				var counter uint64
				for ctx.Err() == nil {
					k := w.Keys[rng.IntN(len(w.Keys))]
					if !k.WriteOnce && rng.IntN(2) == 0 {
						counter++
						w.write(ctx, cl, w.files[ci][k.File], k, int(writer), ValueID(writer, counter), "run")
					} else {
						w.readKey(ctx, ci, k, int(writer), "run")
					}
					select {
					case <-time.After(w.cfg.Think):
					case <-ctx.Done():
					}
				}
			})
		}
	}
	wg.Wait()
}

// FinalReads reads every key reads times (reads rotate over a chain's
// replicas), each read tried up to tries times, until ctx ends; the reads
// that return are the final phase. It returns how many keys had no read
// return.
func (w *Workload) FinalReads(ctx context.Context, reads, tries int) int {
	missing := 0
	for _, k := range w.Keys {
		got := 0
		for range reads {
			for range tries {
				if ctx.Err() != nil {
					break
				}
				ci := rand.IntN(len(w.clients))
				if op := w.readKey(ctx, ci, k, 0, "final"); op.Status != StatusFail {
					got++
					break
				}
			}
		}
		if got == 0 {
			missing++
		}
	}
	return missing
}

// ChunkChain is the chain the workload's chunk id belongs to, by its
// file's layout (the chain table is the one the files were opened with);
// false for a chunk of no workload file.
func (w *Workload) ChunkChain() func(chunkio.ID) (uint32, bool) {
	files := map[uint64]*sdk.File{}
	if len(w.files) > 0 {
		for _, f := range w.files[0] {
			files[f.Inode().Ino()] = f
		}
	}
	return func(id chunkio.ID) (uint32, bool) {
		f, ok := files[id.Inode]
		if !ok {
			return 0, false
		}
		return uint32(f.ChunkChain(id.Index)), true
	}
}

// Close closes the files (recording their length with the control
// plane) and the clients.
func (w *Workload) Close() {
	for _, fs := range w.files {
		for _, f := range fs {
			f.Close()
		}
	}
	w.files = nil
	for _, cl := range w.clients {
		cl.Close()
	}
	w.clients = nil
}
