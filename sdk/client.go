package sdk

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/rpc"
	"github.com/sluicefs/sluice/shmring"
)

// Config says which cluster to use. Empty fields come from the environment:
// SLUICE_CLUSTER and SLUICE_TOKEN.
type Config struct {
	// Cluster is the control plane's gRPC address, or its replicas'
	// ("host:port,host:port,..."): the client follows the leader.
	Cluster string
	Token   string
	// Fabric is the data-plane transport to storage nodes; nil means TCP,
	// keyed by the cluster token. A client in the same process as an
	// embedded cluster passes cluster.Cluster.Fabric() to move data by
	// memory copy.
	Fabric fabric.Transport
	Logger *slog.Logger
	// OpTimeout bounds every call made with a context that has no deadline
	// of its own (default 30 s; negative for none): ReadAt, WriteAt and
	// Close, which take no context, the batched reads and writes, Sync and
	// the metadata calls, and Connect's wait for the cluster. A call cut
	// short by it fails with an error that matches ErrTimeout (and
	// context.DeadlineExceeded); storage and the control plane are retried
	// until then, so it is also how long a dead cluster takes to show.
	OpTimeout time.Duration
}

// DefaultOpTimeout is Config.OpTimeout's default.
const DefaultOpTimeout = 30 * time.Second

// unreachableWait is how long Connect waits for a control plane whose
// every replica refuses the connection (or whose address does not
// resolve) before it says so: long enough for a replica's restart, short
// enough that a wrong address fails at once to a person.
const unreachableWait = 3 * time.Second

// Client is a connection to a cluster. Safe for concurrent use.
type Client struct {
	conn    *rpc.LeaderConn
	meta    metapb.MetaClient
	routing *routing.WatchedRouting
	ep      fabric.Endpoint
	store   *chunkio.Client
	id      uint64
	seq     atomic.Uint64
	log     *slog.Logger
	timeout time.Duration // OpTimeout; 0 for none
	metrics *Metrics
	leases  readLeases
	locks   heldLocks    // file locks held (locks.go), renewed with the leases
	writing atomic.Int64 // files open for writing: while any is, the client renews (leases.go)

	// Write sessions whose end waits for a close to ride on (ending.go).
	endMu    sync.Mutex
	ends     []*metapb.SessionRef
	endTimer *time.Timer
	wg       sync.WaitGroup // renewLeases

	// closing ends when Close begins. It is a signal, not a parent: a call
	// runs in its caller's context, which call cuts short then (with
	// ErrClosed as the cause); only what lives until Close derives from
	// it (the routing watch, the lease renewer).
	closing context.Context
	close   context.CancelFunc
}

// Connect connects to a cluster.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Cluster == "" {
		cfg.Cluster = os.Getenv("SLUICE_CLUSTER")
	}
	if cfg.Token == "" {
		cfg.Token = os.Getenv("SLUICE_TOKEN")
	}
	if cfg.Cluster == "" || cfg.Token == "" {
		return nil, errors.New("sluice: no cluster or token (set SLUICE_CLUSTER and SLUICE_TOKEN)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{log: cfg.Logger, timeout: cfg.OpTimeout, metrics: newMetrics()}
	if c.timeout == 0 {
		c.timeout = DefaultOpTimeout
	} else if c.timeout < 0 {
		c.timeout = 0
	}
	var b [8]byte
	rand.Read(b[:])
	c.id = binary.LittleEndian.Uint64(b[:]) | 1
	c.closing, c.close = context.WithCancel(context.Background())
	var err error
	fail := func(err error) (*Client, error) {
		c.Close()
		return nil, err
	}
	if c.conn, err = rpc.Dial(cfg.Cluster, auth.Credentials(cfg.Token)); err != nil {
		return fail(err)
	}
	c.meta = metapb.NewMetaClient(c.conn)
	// The watch outlives ctx, which bounds only the wait for the first
	// map (with OpTimeout when ctx has no deadline): it runs until Close.
	wctx, wcancel := context.WithCancelCause(c.closing)
	defer wcancel(nil)
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
		defer cancel()
	}
	stop := context.AfterFunc(ctx, func() { wcancel(context.Cause(ctx)) })
	c.routing, err = routing.WatchWith(wctx, mgmtdpb.NewMgmtdClient(c.conn),
		routing.WatchOptions{Logger: cfg.Logger, Unreachable: unreachableWait})
	stop()
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			err = fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		return fail(fsErr("sluice: connect to", cfg.Cluster, err))
	}
	tr := cfg.Fabric
	if tr == nil {
		if tr, err = tcp.New(tcp.Config{Secret: auth.FabricSecret(cfg.Token), Logger: cfg.Logger}); err != nil {
			return fail(err)
		}
	}
	if c.ep, err = tr.Dialer("sdk"); err != nil {
		return fail(err)
	}
	c.store = chunkio.NewClient(c.ep, c.routing)
	c.store.OnRetry = func(error) { c.metrics.retries.Inc() }
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.renewLeases(c.closing, leaseRenewal)
	}()
	return c, nil
}

// Metrics is the client's metrics (sluice_client_*, sluice_loader_*).
func (c *Client) Metrics() *Metrics { return c.metrics }

// Close releases the connection.
func (c *Client) Close() error {
	c.flushEnds()
	c.releaseAllLocks()
	if c.close != nil {
		c.close()
	}
	c.wg.Wait()
	if c.ep != nil {
		c.ep.Close()
	}
	if c.routing != nil {
		c.routing.Close()
	}
	if c.conn != nil {
		c.conn.Close()
	}
	return nil
}

// call is the context of one call made with ctx: ctx itself (its values
// and deadline travel with the call), ended early, with ErrClosed as the
// cause, if the client is closed meanwhile. Call the returned func when
// the call is done.
//
// A ctx with no deadline gets the client's OpTimeout, with ErrTimeout as
// the cause when it ends the call.
func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		tctx, tcancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
		cctx, done := c.call(tctx)
		return cctx, func() { done(); tcancel() }
	}
	cctx, cancel := context.WithCancelCause(ctx)
	if c.closing.Err() != nil { // closed already: end now, not in AfterFunc's goroutine
		cancel(ErrClosed)
		return cctx, func() {}
	}
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return cctx, func() { stop(); cancel(nil) }
}

// OpTimeout is the bound of calls made without a deadline (0: none).
func (c *Client) OpTimeout() time.Duration { return c.timeout }

// timedOut names the OpTimeout in err when it is what ended ctx.
func (c *Client) timedOut(ctx context.Context, err error) error {
	if err != nil && context.Cause(ctx) == ErrTimeout && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w (after %v): %w", ErrTimeout, c.timeout, err)
	}
	return err
}

func (c *Client) next() uint64 { return c.seq.Add(1) }

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, p string, mode uint32) error {
	_, err := c.MkdirAt(ctx, 0, p, Owner{Mode: mode})
	return err
}

// Stat returns a path's inode (symbolic links are not followed: none is,
// anywhere in the SDK).
func (c *Client) Stat(ctx context.Context, p string) (*FileInfo, error) {
	return c.StatAt(ctx, 0, p)
}

// ReadDir lists a directory, in name order. Each entry carries its inode,
// fetched in the same calls as the names (a page of 1000 per call), so
// DirEntry.Info costs nothing more: the listing is what `ls -l` needs in
// one go, where os.ReadDir's lazy Info would cost a call per name here.
func (c *Client) ReadDir(ctx context.Context, p string) ([]DirEntry, error) {
	var out []DirEntry
	after := ""
	for {
		ents, more, err := c.ListAt(ctx, 0, p, after, 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, ents...)
		if !more || len(ents) == 0 {
			return out, nil
		}
		after = ents[len(ents)-1].Name()
	}
}

// Remove removes a file or an empty directory.
func (c *Client) Remove(ctx context.Context, p string) error {
	if err := checkPath("remove", 0, p); err != nil {
		return err
	}
	in, err := c.Stat(ctx, p)
	if err != nil {
		return err
	}
	c.sendEnds() // as UnlinkAt
	cctx, done := c.call(ctx)
	defer done()
	req := &metapb.PathRequest{Path: p, Client: c.id, Seq: c.next()}
	if in.IsDir() {
		_, err = c.meta.Rmdir(cctx, req)
	} else {
		_, err = c.meta.Unlink(cctx, req)
	}
	return fsErr("remove", p, err)
}

// Rename moves from to to, atomically.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	return c.RenameAt(ctx, 0, from, 0, to)
}

// Symlink makes p a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, target, p string) error {
	_, err := c.SymlinkAt(ctx, 0, p, target, Owner{})
	return err
}

// Create makes an empty file and opens it for writing.
func (c *Client) Create(ctx context.Context, p string) (*File, error) {
	return c.CreateOpenAt(ctx, 0, p, Owner{Mode: 0o644})
}

// WriteFile creates p, which must not exist, holding data.
func (c *Client) WriteFile(ctx context.Context, p string, data []byte) error {
	f, err := c.Create(ctx, p)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Open opens a file for reading.
func (c *Client) Open(ctx context.Context, p string) (*File, error) { return c.OpenFile(ctx, p, false) }

// OpenFile opens a file, for writing too when write is set.
func (c *Client) OpenFile(ctx context.Context, p string, write bool) (*File, error) {
	return c.OpenAt(ctx, 0, p, write)
}

// File is an open file.
type File struct {
	c       *Client
	name    string
	in      *metapb.Inode
	chains  []uint32
	session uint64

	mu    sync.Mutex
	size  uint64
	wrote uint64 // the end of what this handle wrote: the file's written mark at Close
	// unpublished: written since the last close or sync that published
	// the length; without it, those send none (the file's times stay).
	unpublished bool
	reserved    uint64 // the file's written mark as the cluster has it: what may be stored without reserving
	closed      bool

	reserving sync.Mutex // one reservation at a time (reserve)

	// A small file's content, held here (inline.go); isSmall is small.on,
	// read without the lock.
	smallMu sync.Mutex
	small   smallState
	isSmall atomic.Bool
}

var (
	_ io.ReaderAt = (*File)(nil)
	_ io.WriterAt = (*File)(nil)
	_ io.Closer   = (*File)(nil)
)

// Name is the path the file was opened by.
func (f *File) Name() string { return f.name }

// Size is the file's length as this handle knows it.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(f.size)
}

// closeSession records the file's length, and the end of what the handle
// wrote (which bounds the chunks the collector removes), and ends its write
// session, or with keep (fsync) keeps it.
func (c *Client) closeSession(ctx context.Context, f *File, keep bool) error {
	if err := f.handOver(ctx, keep); !errors.Is(err, errInChunks) {
		return err
	}
	f.mu.Lock()
	size, wrote, publish := f.size, f.wrote, f.unpublished
	f.mu.Unlock()
	switch {
	case !publish && keep:
		return nil // nothing written since the last sync
	case !publish:
		c.endLater(f) // only the session's end is left: it rides on the next close
		return nil
	}
	req := &metapb.CloseRequest{Ino: f.in.Ino, Session: f.session, KeepOpen: keep, Size: &size, Written: &wrote,
		Client: c.id, Seq: c.next(), Ended: c.takeEnds()}
	cctx, done := c.call(ctx)
	defer done()
	if _, err := c.meta.Close(cctx, req); err != nil {
		c.endAgain(req.Ended)
		return c.timedOut(cctx, fsErr("close", f.name, err))
	}
	f.mu.Lock()
	if f.size == size && f.wrote == wrote { // else written meanwhile: the next close publishes
		f.unpublished = false
	}
	f.mu.Unlock()
	return nil
}

// Buffer is memory registered with the data plane: reads into it land with
// no copy (ReadBatch). It is mapped memory, not Go heap, so it may be handed
// to C (Arrow's C data interface, libsluice). Free it with Release.
type Buffer struct {
	B   []byte
	mr  fabric.MR
	seg *shmring.Segment // the memfd behind a shared buffer; nil otherwise
}

// NewBuffer maps and registers n bytes for batched I/O, on transparent huge
// pages where the kernel gives them.
func (c *Client) NewBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("new buffer: size %d", n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("new buffer of %d bytes: %w", n, err)
	}
	// Transparent huge pages where the kernel has them on request (their
	// usual setting): fewer TLB misses for whoever walks the buffer. A
	// kernel without them says no, and the pages stay small.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return c.register(b, nil)
}

// NewSharedBuffer is NewBuffer over a memfd (huge pages where reserved),
// which another process may map through Fd (by /proc/PID/fd/FD or a passed
// descriptor) to read what lands in it with no copy.
func (c *Client) NewSharedBuffer(n int) (*Buffer, error) {
	seg, err := shmring.NewSegment("sluice-buffer", n, true)
	if err != nil {
		return nil, fmt.Errorf("new shared buffer of %d bytes: %w", n, err)
	}
	return c.register(seg.Bytes()[:n], seg)
}

func (c *Client) register(b []byte, seg *shmring.Segment) (*Buffer, error) {
	mr, err := c.ep.RegisterMemory(b, fabric.AccessRemoteReadWrite)
	if err != nil {
		unmap(b, seg)
		return nil, err
	}
	return &Buffer{B: b, mr: mr, seg: seg}, nil
}

func unmap(b []byte, seg *shmring.Segment) error {
	if seg != nil {
		return seg.Close()
	}
	return unix.Munmap(b)
}

// Fd is the memfd of a shared buffer (NewSharedBuffer), -1 for others. It
// is the buffer's: it closes with Release.
func (b *Buffer) Fd() int {
	if b.seg == nil {
		return -1
	}
	return b.seg.Fd()
}

// Release deregisters and unmaps the buffer; it waits for accesses in
// flight, and B must not be used afterwards.
func (b *Buffer) Release() error {
	err := b.mr.Deregister()
	if uerr := unmap(b.B, b.seg); err == nil {
		err = uerr
	}
	b.B = nil
	return err
}
