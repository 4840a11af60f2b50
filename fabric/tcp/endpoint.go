package tcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/internal/handshake"
)

// Config configures a Transport. Zero fields take the documented defaults.
type Config struct {
	// Secret is the cluster secret every connection proves in its handshake.
	// Required.
	Secret []byte
	// MaxMessage bounds an RPC body this side accepts (default 1 MiB). It is
	// announced to peers, which refuse to send more.
	MaxMessage int
	// MaxInFlight bounds the peer's requests served at once per connection
	// (default 128). A peer that exceeds it is disconnected. Together these
	// bound what a peer can make this side hold: at most MaxInFlight x
	// MaxMessage bytes of request bodies per connection, and MaxConns
	// connections. Bulk data is never buffered: it goes into registered
	// memory or is drained.
	MaxInFlight int
	// ConnsPerPeer bounds the connections this side dials to one peer
	// (default 4). Connections are added only while all existing ones are busy.
	ConnsPerPeer int
	// DataChecksum makes this side checksum the bulk data of the frames it
	// sends too (headers and metadata always are, and data that arrives with
	// a checksum is always checked). It is off by default because Sluice's
	// data is checked end to end above the transport — a chunk write carries
	// the writer's CRC32C, checked by every replica, and a chunk read returns
	// a CRC32C that the reader checks in its own memory — and a second
	// checksum per hop costs one CRC32C pass per end, about a fifth of
	// loopback throughput at 1 MiB on a 2-core machine. Turn it on for data
	// without a checksum of its own.
	DataChecksum bool
	// MaxConns bounds accepted connections (default 4096).
	MaxConns int
	// DialTimeout bounds dialing and the handshake (default 5s).
	DialTimeout time.Duration
	// IOTimeout bounds the transfer of one frame's bulk data (default 30s).
	IOTimeout time.Duration
	// Logger receives connection events (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if len(c.Secret) == 0 {
		return errors.New("fabric/tcp: a cluster secret is required")
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = 1 << 20
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 128
	}
	if c.ConnsPerPeer <= 0 {
		c.ConnsPerPeer = 4
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Transport is fabric over TCP.
type Transport struct {
	cfg Config
}

// New returns a TCP transport.
func New(cfg Config) (*Transport, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg}, nil
}

// Listen starts an endpoint accepting connections at addr; its ID is the
// address it listens on.
func (t *Transport) Listen(addr string) (fabric.Endpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fabric/tcp: listen %s: %w", addr, err)
	}
	ep := t.newEndpoint(fabric.NodeID(ln.Addr().String()))
	ep.ln = ln
	ep.wg.Add(1)
	go ep.acceptLoop()
	return ep, nil
}

// Dialer starts an endpoint that only dials out.
func (t *Transport) Dialer(name string) (fabric.Endpoint, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return t.newEndpoint(fabric.NodeID(name + "-" + hex.EncodeToString(b[:]))), nil
}

func (t *Transport) newEndpoint(id fabric.NodeID) *Endpoint {
	ctx, cancel := context.WithCancel(context.Background())
	ep := &Endpoint{
		cfg:     t.cfg,
		id:      id,
		lim:     limits{maxMeta: uint32(t.cfg.MaxMessage), maxInFlight: uint32(t.cfg.MaxInFlight)},
		log:     t.cfg.Logger.With("fabric", string(id)),
		regions: fabric.NewRegions(id),
		ctx:     ctx,
		cancel:  cancel,
		peers:   make(map[fabric.NodeID]*peer),
		conns:   make(map[*conn]struct{}),
		readers: make(chan *conn),
	}
	ep.OneSided = ep.oneSided
	return ep
}

// Endpoint is a fabric endpoint over TCP.
type Endpoint struct {
	cfg     Config
	id      fabric.NodeID
	lim     limits
	log     *slog.Logger
	regions *fabric.Regions
	bufs    bufPool
	ln      net.Listener

	fabric.Handlers
	fabric.OneSided // Read, Write and batches, over ep.oneSided

	ctx    context.Context // cancelled by Close; parent of handler contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the endpoint started

	readers chan *conn   // idle workers take a connection to read here
	idle    atomic.Int32 // idle workers

	mu     sync.Mutex
	closed bool
	peers  map[fabric.NodeID]*peer
	conns  map[*conn]struct{}
}

// peer is the set of connections to one node.
type peer struct {
	dialMu sync.Mutex // one dial at a time per peer
	conns  []*conn    // under Endpoint.mu
}

var _ fabric.Endpoint = (*Endpoint)(nil)

func (ep *Endpoint) ID() fabric.NodeID { return ep.id }

// dataFlags are the flags of a frame this endpoint sends with n bytes of data.
func (ep *Endpoint) dataFlags(n uint64) uint8 {
	if !ep.cfg.DataChecksum || n == 0 {
		return 0
	}
	return flagDataCRC
}

func (ep *Endpoint) RegisterMemory(buf []byte, access fabric.Access) (fabric.MR, error) {
	return ep.regions.Register(buf, access)
}

// Close stops accepting, closes every connection (failing requests in
// flight on both sides), cancels handlers and waits for all goroutines.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true
	conns := make([]*conn, 0, len(ep.conns))
	for c := range ep.conns {
		conns = append(conns, c)
	}
	ep.mu.Unlock()
	if ep.ln != nil {
		ep.ln.Close()
	}
	// Connections first, so peers see the connection drop rather than
	// replies from handlers whose context was cancelled.
	for _, c := range conns {
		c.close(fabric.ErrClosed)
	}
	ep.cancel()
	ep.wg.Wait()
	return nil
}

func (ep *Endpoint) acceptLoop() {
	defer ep.wg.Done()
	for {
		nc, err := ep.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				ep.log.Error("fabric accept failed", "err", err)
			}
			return
		}
		ep.wg.Add(1)
		go ep.accept(nc)
	}
}

// accept authenticates an inbound connection; nothing else is read from it
// until the peer has proved it knows the secret.
func (ep *Endpoint) accept(nc net.Conn) {
	defer ep.wg.Done()
	setNoDelay(nc)
	nc.SetDeadline(time.Now().Add(ep.cfg.DialTimeout))
	stop := context.AfterFunc(ep.ctx, func() { nc.Close() })
	id, wlim, err := handshake.Accept(nc, ep.cfg.Secret, ep.id, ep.lim.wire())
	lim := fromWire(wlim)
	stop()
	if err != nil {
		ep.log.Warn("fabric handshake refused", "remote", nc.RemoteAddr().String(), "err", err)
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	if err := ep.start(newConn(ep, nc, id, false, lim)); err != nil {
		ep.log.Warn("fabric connection refused", "peer", id, "err", err)
	}
}

// start adds an authenticated connection and starts its reader.
func (ep *Endpoint) start(c *conn) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		c.nc.Close()
		return fabric.ErrClosed
	}
	if !c.outbound && len(ep.conns) >= ep.cfg.MaxConns {
		c.nc.Close()
		return fmt.Errorf("connection limit of %d reached", ep.cfg.MaxConns)
	}
	ep.conns[c] = struct{}{}
	p := ep.peerLocked(c.peer)
	p.conns = append(p.conns, c)
	ep.startReader(c)
	return nil
}

// maxIdleWorkers bounds the workers kept waiting for a socket to read.
const maxIdleWorkers = 64

// startReader has a worker read c: an idle one if there is one, else a new
// one. Workers are reused because a fresh goroutine would grow its stack
// again for every request it serves.
func (ep *Endpoint) startReader(c *conn) {
	select {
	case ep.readers <- c:
	default:
		ep.wg.Add(1)
		go ep.worker(c)
	}
}

// worker reads and serves connections until the endpoint closes, keeping
// itself for reuse while fewer than maxIdleWorkers others wait.
func (ep *Endpoint) worker(c *conn) {
	defer ep.wg.Done()
	for {
		c.readLoop()
		if ep.idle.Add(1) > maxIdleWorkers {
			ep.idle.Add(-1)
			return
		}
		select {
		case c = <-ep.readers:
			ep.idle.Add(-1)
		case <-ep.ctx.Done():
			ep.idle.Add(-1)
			return
		}
	}
}

func (ep *Endpoint) peerLocked(id fabric.NodeID) *peer {
	p := ep.peers[id]
	if p == nil {
		p = &peer{}
		ep.peers[id] = p
	}
	return p
}

// dropConn forgets a closed connection.
func (ep *Endpoint) dropConn(c *conn) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	delete(ep.conns, c)
	p := ep.peers[c.peer]
	if p == nil {
		return
	}
	for i, pc := range p.conns {
		if pc == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			break
		}
	}
	if len(p.conns) == 0 {
		delete(ep.peers, c.peer)
	}
}

// pick chooses the least loaded connection to p, or nil when a new one
// should be dialed: there is none, or all are busy and more may be added.
// Peers that dialed us are only reached over their own connections.
func (ep *Endpoint) pick(node fabric.NodeID) (*conn, *peer, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return nil, nil, fabric.ErrClosed
	}
	p := ep.peerLocked(node)
	var best *conn
	inbound := false
	for _, c := range p.conns {
		inbound = inbound || !c.outbound
		if best == nil || c.load() < best.load() {
			best = c
		}
	}
	if best != nil && (best.load() == 0 || inbound || len(p.conns) >= ep.cfg.ConnsPerPeer) {
		return best, p, nil
	}
	return nil, p, nil
}

// conn returns a connection to node, dialing one if needed.
func (ep *Endpoint) conn(ctx context.Context, node fabric.NodeID) (*conn, error) {
	c, p, err := ep.pick(node)
	if c != nil || err != nil {
		return c, err
	}
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	if c, _, err := ep.pick(node); c != nil || err != nil {
		return c, err
	}
	c, err = ep.dial(ctx, node)
	if err != nil {
		// A busy connection beats none.
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if len(p.conns) > 0 {
			return p.conns[0], nil
		}
		return nil, err
	}
	return c, nil
}

func (ep *Endpoint) dial(ctx context.Context, node fabric.NodeID) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, ep.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(node))
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", fabric.ErrUnreachable, node, err)
	}
	setNoDelay(nc)
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	id, wlim, err := handshake.Dial(nc, ep.cfg.Secret, ep.id, ep.lim.wire())
	lim := fromWire(wlim)
	stop()
	if err != nil {
		nc.Close()
		if errors.Is(err, fabric.ErrAuth) {
			return nil, fmt.Errorf("dial %s: %w", node, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: dial %s: handshake: %v", fabric.ErrUnreachable, node, ctx.Err())
		}
		// A listener that refuses our proof just hangs up.
		return nil, fmt.Errorf("%w: dial %s: handshake: %v", fabric.ErrUnreachable, node, err)
	}
	nc.SetDeadline(time.Time{})
	if id != node {
		ep.log.Debug("fabric peer answers under another id", "dialed", node, "id", id)
	}
	// Connections are filed under the name we dialed, which is how callers
	// address the peer.
	c := newConn(ep, nc, node, true, lim)
	if err := ep.start(c); err != nil {
		return nil, err
	}
	return c, nil
}

func setNoDelay(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
}

// Tables returns the endpoint's registered memory and handlers, so that
// fabric/local can serve them to peers in the same process (local.Attach).
func (ep *Endpoint) Tables() (*fabric.Regions, *fabric.Handlers) {
	return ep.regions, &ep.Handlers
}
