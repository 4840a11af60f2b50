package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/shmring"
)

// AgentConfig configures a local agent.
type AgentConfig struct {
	// Path is the unix socket applications dial (DialAgent).
	Path string
	// Lease is how stale a client's heartbeat may get before the client is
	// taken for dead and reclaimed (default 2s).
	Lease time.Duration
	// Batch is how many ring entries are taken at a time (default 128),
	// and Inflight how many batches of one client are served at once
	// (default 4, shmring's): a batch waiting on a replicated write does not hold
	// back the reads behind it.
	Batch    int
	Inflight int
	// BatchBytes bounds the bytes one batch's entries name: 0 picks
	// agentBatchBytes, negative means no bound.
	BatchBytes int
	// MaxFiles bounds the files one client may hold open (default 4096).
	MaxFiles int
	Logger   *slog.Logger
}

// Agent is the local agent: it serves applications' shared-memory rings
// (shmring) on behalf of this client. Each application hands over its Iov
// and rings; the agent registers the Iov with the fabric once, so storage
// pushes read bytes straight into it and pulls written bytes straight out
// of it, with no copy in this process. Entries name files the application
// opened through the agent (DialAgent's Open and Create); entries are
// taken in batches and served as batched reads and writes (ReadBatch,
// WriteBatch), each completion carrying status, length and the CRC32C of
// the bytes in the Iov. When an application dies its files are closed, its
// Iov deregistered and its segments unmapped; completions meant for it are
// dropped. Entries in flight are not ordered among themselves (as in
// io_uring without links): a read submitted with a write of the same range
// may see the bytes before or after it; wait for the write's completion.
// Close the agent before its Client.
//
// The FUSE mount hosts one; `sluice agent` runs one on its own.
type Agent struct {
	c   *Client
	cfg AgentConfig
	srv *shmring.Server

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
	hinted    sync.Once // the huge-page hint (hugeHint)
}

// NewAgent starts an agent for c at cfg.Path; it serves until Close.
func NewAgent(c *Client, cfg AgentConfig) (*Agent, error) {
	if cfg.Path == "" {
		return nil, errors.New("agent: no socket path")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 128
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = agentBatchBytes(c.ep)
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{c: c, cfg: cfg, closed: make(chan struct{})}
	srv, err := shmring.Listen(shmring.ServerConfig{Path: cfg.Path, Attach: a.attach, Lease: cfg.Lease, Batch: cfg.Batch, BatchBytes: uint64(max(cfg.BatchBytes, 0)), Inflight: cfg.Inflight, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.srv = srv
	return a, nil
}

// agentBatchBytes is the bound on a batch's bytes an agent on ep takes by
// default. Over a wire the agent checks every byte storage pushed into the
// Iov once the batch's reads are done, so it takes batches of 2 MiB at most:
// the check reads bytes still in cache, and a loader's first samples
// complete before the rest of what it asked for (a Python loader through
// `sluice agent`, 2026-12-03, against unbounded batches: 1.09–1.17× the
// samples/s at 1 MiB and 1.03–1.11× at 128 KiB with both agents on one
// cluster, epochs alternating; 1.01–1.02× and 1.07× in separate runs of
// benchmarks/peers.py with AGENT_PROCESS set). On an in-process fabric the
// storage node checks the bytes as it copies them, so the agent has no pass
// to keep in cache and larger batches keep more copies in flight (2 MiB
// there: 0.88×): no bound.
func agentBatchBytes(ep fabric.Endpoint) int {
	if _, ok := ep.(fabric.SummingEndpoint); ok {
		return -1
	}
	return 2 << 20
}

// Serve blocks until ctx ends or the agent is closed, then closes it.
func (a *Agent) Serve(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-a.closed:
	}
	return a.Close()
}

// Close stops accepting, reclaims every client and waits for the work in
// flight.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.closeErr = a.srv.Close()
		close(a.closed)
	})
	return a.closeErr
}

// Clients is how many applications the agent serves.
func (a *Agent) Clients() int { return a.srv.Clients() }

// agentClient is the agent's side of one application.
type agentClient struct {
	a   *Agent
	id  uint64
	iov *Buffer // registered once, at attach; mapped by shmring, never Released

	mu    sync.Mutex
	files map[uint64]*File
	next  uint64
}

func (a *Agent) attach(ss *shmring.Session) (shmring.Serving, error) {
	mr, err := a.c.ep.RegisterMemory(ss.Iov(), fabric.AccessRemoteReadWrite)
	if err != nil {
		return nil, fmt.Errorf("register the Iov: %w", err)
	}
	a.cfg.Logger.Debug("agent: client attached", "client", ss.ID(), "iov", len(ss.Iov()), "huge", ss.Huge())
	if !ss.Huge() && len(ss.Iov()) >= 2<<20 && !transparentHuge() {
		a.hugeHint(ss.ID())
	}
	return &agentClient{a: a, id: ss.ID(), iov: &Buffer{B: ss.Iov(), mr: mr}, files: map[uint64]*File{}}, nil
}

// transparentHuge is shmring.TransparentHuge; a test sets it rather than
// the kernel's setting, which other packages' tests change.
var transparentHuge = shmring.TransparentHuge

// hugeHint tells the operator, once, that clients' memory is on 4 KiB
// pages where huge ones were to be had: a loader's pass over large
// samples is 10-20% faster on them (BENCHMARKS.md, "Huge pages for the
// loader's memory").
func (a *Agent) hugeHint(client uint64) {
	a.hinted.Do(func() {
		a.cfg.Logger.Info("agent: a client's memory is on 4 KiB pages; loaders of large samples read faster on huge pages: "+
			"reserve some (echo N > /proc/sys/vm/nr_hugepages) or allow transparent ones for shared memory "+
			"(echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled)", "client", client)
	})
}

// agentRequest is a control message from an application; agentReply the
// answer. They are rare (one per open and close), so JSON.
type agentRequest struct {
	Op     string `json:"op"` // "open" or "close"
	Path   string `json:"path,omitempty"`
	Write  bool   `json:"write,omitempty"`
	Create bool   `json:"create,omitempty"` // a new file, open for writing
	File   uint64 `json:"file,omitempty"`
}

type agentReply struct {
	File uint64 `json:"file,omitempty"`
	Size int64  `json:"size"`
}

func (ac *agentClient) Control(ctx context.Context, req []byte) ([]byte, error) {
	var r agentRequest
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, fmt.Errorf("bad control message: %w", err)
	}
	switch r.Op {
	case "open":
		ac.mu.Lock()
		full := len(ac.files) >= ac.a.cfg.MaxFiles
		ac.mu.Unlock()
		if full {
			return nil, fmt.Errorf("open %s: %d files open already, the limit", r.Path, ac.a.cfg.MaxFiles)
		}
		var f *File
		var err error
		if r.Create {
			f, err = ac.a.c.Create(ctx, r.Path)
		} else {
			f, err = ac.a.c.OpenFile(ctx, r.Path, r.Write)
		}
		if err != nil {
			return nil, err
		}
		ac.mu.Lock()
		ac.next++
		h := ac.next
		ac.files[h] = f
		ac.mu.Unlock()
		return json.Marshal(agentReply{File: h, Size: f.Size()})
	case "close":
		ac.mu.Lock()
		f := ac.files[r.File]
		delete(ac.files, r.File)
		ac.mu.Unlock()
		if f == nil {
			return nil, fmt.Errorf("close: no open file %d", r.File)
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		return json.Marshal(agentReply{Size: f.Size()})
	}
	return nil, fmt.Errorf("unknown control op %q", r.Op)
}

// Serve runs one batch: the reads as one batched read, the writes as one
// batched write, both at once. shmring has already checked every entry's
// op and range against the Iov.
func (ac *agentClient) Serve(ctx context.Context, es []shmring.Entry, cs []shmring.Completion) {
	reads, readAt := make([]ReadOp, 0, len(es)), make([]int, 0, len(es)) // a batch is mostly reads
	var writes []WriteOp
	var writeAt []int
	ac.mu.Lock()
	for i, e := range es {
		cs[i] = shmring.Completion{UserData: e.UserData}
		f := ac.files[e.File]
		switch {
		case f == nil:
			cs[i].Status = -int32(unix.EBADF)
		case e.Offset > 1<<62: // so that it fits an int64; the batch checks the file's own limit
			cs[i].Status = -int32(unix.EFBIG)
		case e.Op == shmring.OpRead:
			reads, readAt = append(reads, ReadOp{File: f, Off: int64(e.Offset), N: int(e.Length), Buf: ac.iov, BufOff: int(e.BufOff)}), append(readAt, i)
		default:
			writes, writeAt = append(writes, WriteOp{File: f, Off: int64(e.Offset), N: int(e.Length), Buf: ac.iov, BufOff: int(e.BufOff)}), append(writeAt, i)
		}
	}
	ac.mu.Unlock()
	var wg sync.WaitGroup
	if len(writes) > 0 {
		wg.Go(func() {
			for k, err := range ac.a.c.writeOps(ctx, writes) {
				c := &cs[writeAt[k]]
				if c.Status = -int32(Errno(err)); c.Status == 0 {
					w := writes[k]
					c.Length, c.CRC = uint32(w.N), chunkio.CRC(ac.iov.B[w.BufOff:w.BufOff+w.N])
				}
			}
		})
	}
	if len(reads) > 0 {
		for k, res := range ac.a.c.readOps(ctx, reads, true) {
			c := &cs[readAt[k]]
			if c.Status = -int32(Errno(res.Err)); c.Status == 0 {
				c.Length, c.CRC = uint32(res.N), res.CRC
			}
		}
	}
	wg.Wait()
}

// Close runs when the application is gone: its files are closed (a file
// written through the agent gets the length its writes reached) and its
// Iov deregistered, which waits for any access still in progress, so the
// segment can be unmapped safely afterwards.
func (ac *agentClient) Close() error {
	ac.mu.Lock()
	files := ac.files
	ac.files = nil
	ac.mu.Unlock()
	var errs []error
	for _, f := range files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	// Deregister only: the mapping is shmring's, unmapped after this.
	if err := ac.iov.mr.Deregister(); err != nil {
		errs = append(errs, fmt.Errorf("deregister the Iov: %w", err))
	}
	ac.a.cfg.Logger.Debug("agent: client reclaimed", "client", ac.id, "files", len(files))
	return errors.Join(errs...)
}
