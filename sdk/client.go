package sdk

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/rpc"
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
}

// Errors callers branch on (they wrap the cluster's own).
var (
	ErrNotExist = errors.New("sluice: no such file or directory")
	ErrExist    = errors.New("sluice: file exists")
)

// Client is a connection to a cluster. Safe for concurrent use.
type Client struct {
	conn    *rpc.LeaderConn
	meta    metapb.MetaClient
	ctx     context.Context // ends with Close: every call made through the client ends then too
	cancel  context.CancelFunc
	routing *routing.WatchedRouting
	ep      fabric.Endpoint
	store   *chunkio.Client
	id      uint64
	seq     atomic.Uint64
	log     *slog.Logger
	leases  readLeases
	wg      sync.WaitGroup // renewLeases
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
	c := &Client{log: cfg.Logger}
	var b [8]byte
	rand.Read(b[:])
	c.id = binary.LittleEndian.Uint64(b[:]) | 1
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var err error
	fail := func(err error) (*Client, error) {
		c.Close()
		return nil, err
	}
	if c.conn, err = rpc.Dial(cfg.Cluster, auth.Credentials(cfg.Token)); err != nil {
		return fail(err)
	}
	c.meta = metapb.NewMetaClient(c.conn)
	wctx, wcancel := context.WithCancel(c.ctx)
	defer wcancel()
	stop := context.AfterFunc(ctx, wcancel)
	c.routing, err = routing.Watch(wctx, mgmtdpb.NewMgmtdClient(c.conn), cfg.Logger)
	stop()
	if err != nil {
		return fail(fmt.Errorf("sluice: connect to %s: %w", cfg.Cluster, err))
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
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.renewLeases(c.ctx, leaseRenewal)
	}()
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error {
	if c.cancel != nil {
		c.cancel()
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

func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	merged, cancel := context.WithCancel(c.ctx)
	stop := context.AfterFunc(ctx, cancel)
	return merged, func() { stop(); cancel() }
}

func (c *Client) next() uint64 { return c.seq.Add(1) }

// fsErr turns a control-plane status into an error callers can test.
func fsErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	cause := err
	if e := fsmeta.ErrorOf(err); e != nil {
		cause = e // errors.Is(err, ErrNotEmpty) and the like work
	}
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("%s %s: %w (%w)", op, p, ErrNotExist, cause)
	case codes.AlreadyExists:
		return fmt.Errorf("%s %s: %w (%w)", op, p, ErrExist, cause)
	case codes.InvalidArgument: // as checkPath's refusals are
		return fmt.Errorf("%s %s: %w (%w)", op, p, fs.ErrInvalid, cause)
	}
	return fmt.Errorf("%s %s: %w", op, p, cause)
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, p string, mode uint32) error {
	_, err := c.MkdirAt(ctx, 0, p, Owner{Mode: mode})
	return err
}

// Stat returns a path's inode.
func (c *Client) Stat(ctx context.Context, p string) (*metapb.Inode, error) {
	return c.StatAt(ctx, 0, p)
}

// ReadDir lists a directory.
func (c *Client) ReadDir(ctx context.Context, p string) ([]*metapb.DirEntry, error) {
	if err := checkPath("readdir", 0, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	var out []*metapb.DirEntry
	after := ""
	for {
		r, err := c.meta.List(cctx, &metapb.ListRequest{Path: p, After: after, Limit: 1000})
		if err != nil {
			return nil, fsErr("readdir", p, err)
		}
		out = append(out, r.Entries...)
		if !r.More || len(r.Entries) == 0 {
			return out, nil
		}
		after = r.Entries[len(r.Entries)-1].Name
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
	cctx, done := c.call(ctx)
	defer done()
	req := &metapb.PathRequest{Path: p, Client: c.id, Seq: c.next()}
	if in.Type == metapb.InodeType_DIRECTORY {
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
	if err := checkPath("create", 0, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	_, err := c.meta.Create(cctx, &metapb.MakeRequest{Path: p, Mode: 0o644, Client: c.id, Seq: c.next()})
	done()
	if err != nil {
		return nil, fsErr("create", p, err)
	}
	return c.OpenFile(ctx, p, true)
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

	mu     sync.Mutex
	size   uint64
	closed bool
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

// closeSession records the file's length and ends its write session, or
// with keep (fsync) keeps it.
func (c *Client) closeSession(ctx context.Context, f *File, size uint64, keep bool) error {
	cctx, done := c.call(ctx)
	defer done()
	_, err := c.meta.Close(cctx, &metapb.CloseRequest{Ino: f.in.Ino, Session: f.session, Size: &size, KeepOpen: keep, Client: c.id, Seq: c.next()})
	return fsErr("close", f.name, err)
}

// bytesIEC formats n bytes with a binary unit (GiB, TiB).
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Buffer is memory registered with the data plane: reads into it land with
// no copy (ReadBatch). It is mapped memory, not Go heap, so it may be handed
// to C (Arrow's C data interface, libsluice). Free it with Release.
type Buffer struct {
	B  []byte
	mr fabric.MR
}

// NewBuffer maps and registers n bytes for batched I/O.
func (c *Client) NewBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("new buffer: size %d", n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("new buffer of %d bytes: %w", n, err)
	}
	mr, err := c.ep.RegisterMemory(b, fabric.AccessRemoteReadWrite)
	if err != nil {
		unix.Munmap(b)
		return nil, err
	}
	return &Buffer{B: b, mr: mr}, nil
}

// Release deregisters and unmaps the buffer; it waits for accesses in
// flight, and B must not be used afterwards.
func (b *Buffer) Release() error {
	err := b.mr.Deregister()
	if uerr := unix.Munmap(b.B); err == nil {
		err = uerr
	}
	b.B = nil
	return err
}

// ReadOp is one range of a batched read: N bytes of File at Off into Buf at
// BufOff.
type ReadOp struct {
	File   *File
	Off    int64
	N      int
	Buf    *Buffer
	BufOff int
}

// ReadBatch reads every op, grouped into one call per storage node, each
// node pushing straight into the ops' buffers (no copy). Ranges past a
// file's end are cut short; holes read as zeros. A range the batch could
// not read (its node failed or was unreachable, routing moved on, a chunk
// was rewritten while it was sent, the bytes arrived damaged) is read again
// on its own through the retrying path, so a failover does not fail the
// batch. It returns the first failure that remains.
func (c *Client) ReadBatch(ctx context.Context, ops []ReadOp) error {
	reads := make([]chunkio.BatchRead, 0, len(ops))
	type span struct {
		buf      *Buffer
		off, end int
	}
	spans := make([]span, 0, len(ops))
	for _, op := range ops {
		if op.File == nil || op.Buf == nil || op.Off < 0 || op.N < 0 {
			return fmt.Errorf("read batch: a range needs a file, a buffer, and no negative offset or length")
		}
		if op.BufOff < 0 || op.BufOff+op.N > len(op.Buf.B) {
			return fmt.Errorf("read batch: range [%d:+%d] outside its buffer", op.BufOff, op.N)
		}
		n := int(min(int64(op.N), max(0, op.File.Size()-op.Off)))
		for _, pc := range op.File.pieces(op.Off, n, maxPiece) {
			reads = append(reads, chunkio.BatchRead{Chain: op.File.chain(pc.index),
				Chunk: chunkio.ID{Inode: op.File.in.Ino, Index: uint32(pc.index)}, Offset: pc.chunkOff,
				Dst: op.Buf.mr.Remote(op.BufOff+pc.off, pc.n), N: -1}) // N stays -1 if its node never answered
			spans = append(spans, span{op.Buf, op.BufOff + pc.off, op.BufOff + pc.off + pc.n})
		}
	}
	cctx, done := c.call(ctx)
	defer done()
	// A node's failure shows in its reads (N left at -1); the batch's own
	// error adds nothing to them.
	_ = c.store.ReadBatch(cctx, reads)
	var fenced *Buffer
	for i, r := range reads {
		s := spans[i]
		if s.buf != fenced { // once per buffer: every push into it is done
			s.buf.mr.Fence()
			fenced = s.buf
		}
		if r.Err != nil || r.N < 0 || r.N > s.end-s.off || chunkio.CRC(s.buf.B[s.off:s.off+r.N]) != r.CRC {
			n, _, err := c.store.ReadRegistered(cctx, r.Chain, r.Chunk, r.Offset, s.buf.mr, s.off, s.buf.B[s.off:s.end], false)
			if err != nil {
				return fmt.Errorf("read batch: %w", err)
			}
			r.N = n
		}
		clear(s.buf.B[s.off+r.N : s.end]) // holes read as zeros
	}
	return nil
}
