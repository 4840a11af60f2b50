//go:build verbs

package verbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/internal/handshake"
)

// Config configures a verbs Transport. Zero fields take the documented
// defaults.
type Config struct {
	// Secret is the cluster secret proved in the bootstrap handshake. Required.
	Secret []byte
	// Device names the RDMA device (as in ibv_devices, e.g. "mlx5_0");
	// empty means the first one.
	Device string
	// Port is the device port (default 1).
	Port int
	// GIDIndex selects the port's GID (default 0; RoCE v2 is often 1 or 3,
	// see show_gids).
	GIDIndex int
	// MsgSize is the size of each receive buffer, so the largest RPC message
	// (default 64 KiB).
	MsgSize int
	// RecvBuffers is the depth of the shared receive queue (default 4096).
	RecvBuffers int
	// CreditsPerPeer is how many receive buffers each peer may fill at once
	// (default 64); RecvBuffers / CreditsPerPeer bounds the peers.
	CreditsPerPeer int
	// OneSidedPerPeer bounds RDMA READs and WRITEs in flight per peer, both
	// ways (default 16; at most the NIC's max_qp_rd_atom for READs).
	OneSidedPerPeer int
	// StagingSize is the registered bounce buffer for Reads and Writes whose
	// local buffer is not registered memory (default 8 MiB).
	StagingSize int
	// NUMA places the transport's buffers: "auto" (default) on the device's
	// NUMA node as sysfs reports it, "off" anywhere, or a node number.
	NUMA string
	// DialTimeout bounds dialing, the handshake and the queue-pair exchange
	// (default 5s).
	DialTimeout time.Duration
	// IOTimeout bounds how long a posted operation may take before the
	// connection is declared broken (default 30s).
	IOTimeout time.Duration
	// Logger receives connection events (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if len(c.Secret) == 0 {
		return errors.New("fabric/verbs: a cluster secret is required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Port, 1)
	def(&c.MsgSize, 64<<10)
	def(&c.RecvBuffers, 4096)
	def(&c.CreditsPerPeer, 64)
	def(&c.OneSidedPerPeer, 16)
	def(&c.StagingSize, 8<<20)
	if c.MsgSize < minMsgSize || c.MsgSize > 1<<30 {
		return fmt.Errorf("fabric/verbs: message size %d out of range", c.MsgSize)
	}
	if c.CreditsPerPeer > 0xffff || c.OneSidedPerPeer > 0xffff || c.CreditsPerPeer > c.RecvBuffers {
		return fmt.Errorf("fabric/verbs: credits per peer (%d, %d) out of range", c.CreditsPerPeer, c.OneSidedPerPeer)
	}
	if c.NUMA == "" {
		c.NUMA = "auto"
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

// Transport is fabric over RDMA verbs.
type Transport struct {
	cfg Config
}

// New returns a verbs transport. Devices are opened per endpoint.
func New(cfg Config) (*Transport, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg}, nil
}

var _ fabric.Transport = (*Transport)(nil)

// Listen starts an endpoint whose bootstrap listens on addr (TCP); its ID is
// that address.
func (t *Transport) Listen(addr string) (fabric.Endpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fabric/verbs: listen %s: %w", addr, err)
	}
	ep, err := t.newEndpoint(fabric.NodeID(ln.Addr().String()))
	if err != nil {
		ln.Close()
		return nil, err
	}
	ep.ln = ln
	ep.wg.Add(1)
	go ep.acceptLoop()
	return ep, nil
}

// Dialer starts an endpoint that only dials out.
func (t *Transport) Dialer(name string) (fabric.Endpoint, error) {
	var b [8]byte
	rand.Read(b[:])
	return t.newEndpoint(fabric.NodeID(name + "-" + hex.EncodeToString(b[:])))
}

// Endpoint is a fabric endpoint on an RDMA device.
type Endpoint struct {
	cfg Config
	id  fabric.NodeID
	log *slog.Logger
	dev *device
	ln  net.Listener

	fabric.Handlers
	fabric.OneSided
	regions *fabric.Regions
	comps   *completions

	recv      *memoryRegion // RecvBuffers x MsgSize, posted on the SRQ
	send      *memoryRegion // CreditsPerPeer x MsgSize outgoing messages
	sendSlots chan int
	stage     *memoryRegion
	stageSeg  chan int // StagingSize / piece pieces
	piece     int
	rdDepth   int              // one-sided chains in flight per peer, within the device's limits
	sendDepth int              // send queue depth per queue pair
	mrs       map[*mr]struct{} // user registrations, undone by Close at the latest

	lmu    sync.RWMutex
	locals []*localRegion // registered memory by address, for lkeys

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	peers  map[fabric.NodeID]*rc
	byQPN  map[uint32]*rc
	qps    []*queuePair // every queue pair made, destroyed by Close at the latest
	dialMu sync.Mutex
}

const stagePiece = 1 << 20

type localRegion struct {
	start, end uintptr
	mem        *memoryRegion
}

func (t *Transport) newEndpoint(id fabric.NodeID) (*Endpoint, error) {
	cfg := t.cfg
	dev, err := openDevice(cfg.Device, cfg.Port, cfg.GIDIndex, 2*cfg.RecvBuffers, cfg.RecvBuffers)
	if err != nil {
		return nil, err
	}
	node := -1
	switch cfg.NUMA {
	case "auto":
		node = deviceNUMANode("/sys", dev.name)
	case "off":
	default:
		if node, err = strconv.Atoi(cfg.NUMA); err != nil {
			dev.close()
			return nil, fmt.Errorf("fabric/verbs: NUMA %q: want auto, off or a node number", cfg.NUMA)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ep := &Endpoint{
		cfg: cfg, id: id, log: cfg.Logger.With("fabric", string(id), "device", dev.name), dev: dev,
		regions: fabric.NewRegions(id), comps: newCompletions(),
		ctx: ctx, cancel: cancel,
		peers: make(map[fabric.NodeID]*rc), byQPN: make(map[uint32]*rc), mrs: make(map[*mr]struct{}),
	}
	ep.OneSided = ep.oneSided
	maxRd, maxInitRd, maxWR, err := dev.caps()
	if err != nil {
		dev.close()
		return nil, err
	}
	// Each peer may have OneSidedPerPeer chains in flight on its queue pair,
	// plus its sends: the send queue is sized for that, within the device.
	ep.rdDepth = max(1, min(cfg.OneSidedPerPeer, maxRd, maxInitRd, (maxWR-cfg.CreditsPerPeer-8)/maxChain))
	ep.sendDepth = ep.rdDepth*maxChain + cfg.CreditsPerPeer + 8
	alloc := func(n int) (*memoryRegion, error) {
		buf, err := AllocMemory(n, node)
		if err != nil {
			return nil, err
		}
		m, err := dev.register(buf, false, false)
		if err != nil {
			FreeMemory(buf)
			return nil, err
		}
		ep.addLocal(m)
		return m, nil
	}
	if ep.recv, err = alloc(cfg.RecvBuffers * cfg.MsgSize); err == nil {
		if ep.send, err = alloc(cfg.CreditsPerPeer * cfg.MsgSize); err == nil {
			ep.stage, err = alloc(cfg.StagingSize)
		}
	}
	if err != nil {
		ep.release()
		return nil, err
	}
	ep.sendSlots = make(chan int, cfg.CreditsPerPeer)
	for i := 0; i < cfg.CreditsPerPeer; i++ {
		ep.sendSlots <- i
	}
	ep.piece = min(stagePiece, cfg.StagingSize)
	ep.stageSeg = make(chan int, cfg.StagingSize/ep.piece)
	for i := 0; i < cap(ep.stageSeg); i++ {
		ep.stageSeg <- i
	}
	for i := 0; i < cfg.RecvBuffers; i++ {
		if err := ep.repost(i); err != nil {
			ep.release()
			return nil, err
		}
	}
	fabric.Handle(ep, checkMethod, ep.serveCheck)
	ep.wg.Add(1)
	go ep.pollLoop()
	return ep, nil
}

func (ep *Endpoint) ID() fabric.NodeID { return ep.id }

// release frees the device resources (after everything using them stopped).
func (ep *Endpoint) release() {
	for _, m := range []*memoryRegion{ep.recv, ep.send, ep.stage} {
		if m != nil {
			m.deregister()
			FreeMemory(m.buf)
		}
	}
	ep.dev.close()
}

// Close fails every connection, stops the poller and frees the device.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true
	peers := make([]*rc, 0, len(ep.peers))
	for _, c := range ep.peers {
		peers = append(peers, c)
	}
	ep.mu.Unlock()
	if ep.ln != nil {
		ep.ln.Close()
	}
	for _, c := range peers {
		c.fail(fabric.ErrClosed)
	}
	ep.comps.close(fabric.ErrClosed)
	ep.cancel()
	ep.wg.Wait()
	ep.mu.Lock()
	qps := ep.qps
	ep.qps = nil
	ep.mu.Unlock()
	for _, qp := range qps {
		qp.destroy()
	}
	ep.lmu.Lock()
	mrs := ep.mrs
	ep.mrs = nil
	ep.lmu.Unlock()
	for m := range mrs {
		m.mem.deregister()
	}
	ep.release()
	return nil
}

// enter admits an operation; Close waits for admitted ones before it frees
// the device.
func (ep *Endpoint) enter() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return fabric.ErrClosed
	}
	ep.wg.Add(1)
	return nil
}

func (ep *Endpoint) addLocal(m *memoryRegion) {
	ep.lmu.Lock()
	defer ep.lmu.Unlock()
	start := addrOf(m.buf)
	ep.locals = append(ep.locals, &localRegion{start: start, end: start + uintptr(len(m.buf)), mem: m})
	sort.Slice(ep.locals, func(i, j int) bool { return ep.locals[i].start < ep.locals[j].start })
}

func (ep *Endpoint) removeLocal(m *memoryRegion) {
	ep.lmu.Lock()
	defer ep.lmu.Unlock()
	for i, l := range ep.locals {
		if l.mem == m {
			ep.locals = append(ep.locals[:i], ep.locals[i+1:]...)
			return
		}
	}
}

// findLocal returns the lkey of the registered region holding b and the
// address a scatter entry uses for b, if b is registered memory.
func (ep *Endpoint) findLocal(b []byte) (uint32, uintptr, bool) {
	a := addrOf(b)
	ep.lmu.RLock()
	defer ep.lmu.RUnlock()
	i := sort.Search(len(ep.locals), func(i int) bool { return ep.locals[i].end > a })
	if i < len(ep.locals) && ep.locals[i].start <= a && a+uintptr(len(b)) <= ep.locals[i].end {
		m := ep.locals[i].mem
		return m.lkey(), m.localAddr(b), true
	}
	return 0, 0, false
}

// mr is a registered region: the software table's entry and the NIC's.
type mr struct {
	fabric.MR
	ep  *Endpoint
	mem *memoryRegion
}

// RegisterMemory registers buf with the NIC for the given remote access.
// buf must be C or mmap memory (AllocMemory), never Go heap memory.
func (ep *Endpoint) RegisterMemory(buf []byte, access fabric.Access) (fabric.MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("fabric/verbs: register an empty buffer")
	}
	if err := ep.enter(); err != nil {
		return nil, err
	}
	defer ep.wg.Done()
	mem, err := ep.dev.register(buf, access&fabric.AccessRemoteRead != 0, access&fabric.AccessRemoteWrite != 0)
	if err != nil {
		return nil, err
	}
	fmr, err := ep.regions.RegisterTagged(buf, access, mem.rkey())
	if err != nil {
		mem.deregister()
		return nil, err
	}
	ep.addLocal(mem)
	m := &mr{MR: fmr, ep: ep, mem: mem}
	ep.lmu.Lock()
	ep.mrs[m] = struct{}{}
	ep.lmu.Unlock()
	return m, nil
}

// Deregister revokes the key (in the table and on the NIC). After the
// endpoint closed, the NIC registration is already gone.
func (m *mr) Deregister() error {
	if err := m.MR.Deregister(); err != nil {
		return err
	}
	m.ep.removeLocal(m.mem)
	m.ep.lmu.Lock()
	_, live := m.ep.mrs[m]
	delete(m.ep.mrs, m)
	m.ep.lmu.Unlock()
	if !live {
		return nil
	}
	return m.mem.deregister()
}

// pollLoop drains the completion queue: send-queue completions go to their
// waiters, receives to the message handler. It sleeps on the completion
// channel when there is nothing to do.
func (ep *Endpoint) pollLoop() {
	defer ep.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var pb pollBuf
	out := make([]completion, 0, pollBatch)
	for ep.ctx.Err() == nil {
		out = ep.dev.poll(&pb, out[:0])
		if len(out) == 0 {
			// Arm, then look again: a completion that arrived before the
			// arming raises no event.
			err := ep.dev.arm()
			if err == nil {
				if out = ep.dev.poll(&pb, out[:0]); len(out) == 0 {
					err = ep.dev.block(100)
				}
			}
			if err != nil {
				ep.log.Error("fabric/verbs poller stopped", "err", err)
				ep.comps.close(err)
				return
			}
		}
		for _, wc := range out {
			if wc.recv {
				ep.onRecv(wc)
			} else if !ep.comps.complete(wc) && wc.status != wcSuccess {
				ep.log.Debug("fabric/verbs completion without a waiter", "wr", wc.wrID, "status", wc.status)
			}
		}
	}
}

func (ep *Endpoint) recvSlot(i int) []byte {
	return ep.recv.buf[i*ep.cfg.MsgSize : (i+1)*ep.cfg.MsgSize]
}

func (ep *Endpoint) repost(i int) error {
	return ep.dev.postRecv(uint64(i), ep.recvSlot(i), ep.recv.lkey())
}

// onRecv takes a received message out of its buffer, gives the buffer back
// to the shared receive queue and handles the message.
func (ep *Endpoint) onRecv(wc completion) {
	slot := int(wc.wrID)
	ep.mu.Lock()
	c := ep.byQPN[wc.qpNum]
	ep.mu.Unlock()
	var msg []byte
	if wc.status == wcSuccess && c != nil {
		msg = append([]byte(nil), ep.recvSlot(slot)[:wc.byteLen]...)
	}
	if err := ep.repost(slot); err != nil {
		ep.log.Error("fabric/verbs receive buffer lost", "err", err)
	}
	if msg == nil {
		return
	}
	if c.ret.consumed() && c.crediting.CompareAndSwap(false, true) {
		ep.spawn(func() {
			defer c.crediting.Store(false)
			c.sendCredits(ep.ctx)
		})
	}
	h, body, err := parseMsg(msg)
	if err != nil {
		c.fail(err)
		return
	}
	c.grant(int(h.credits))
	switch h.typ {
	case msgReply:
		c.deliver(h, body)
	case msgCall:
		ep.spawn(func() { c.serveCall(h, body) })
	}
}

func (ep *Endpoint) spawn(fn func()) {
	ep.wg.Add(1)
	go func() {
		defer ep.wg.Done()
		fn()
	}()
}

// rc is a reliable connection to one peer: an RC queue pair, the TCP
// bootstrap connection kept open to notice the peer's death, and the
// credits each side granted the other.
type rc struct {
	ep   *Endpoint
	peer fabric.NodeID
	qp   *queuePair
	boot net.Conn

	credit    *credits // SENDs we may have outstanding (the peer's buffers), but one
	reserve   *credits // the one kept for credit-only messages, so credits always flow
	calls     *credits // our calls in flight: half the credits, so replies always find some
	oneSided  *credits
	ret       *creditReturn
	crediting atomic.Bool // a credit-only message is on its way
	msgSize   int         // largest message either side accepts

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan result
	err     error
	done    chan struct{}
}

type result struct {
	status fabric.Code
	body   []byte
}

// fail breaks the connection: pending calls fail with err and the next
// operation to this peer builds a new one.
func (c *rc) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if !errors.Is(err, fabric.ErrClosed) && !errors.Is(err, fabric.ErrPeerClosed) {
		err = fmt.Errorf("%w: %s: %v", fabric.ErrPeerClosed, c.peer, err)
	}
	c.err = err
	close(c.done)
	c.mu.Unlock()
	c.credit.close(err)
	c.reserve.close(err)
	c.calls.close(err)
	c.oneSided.close(err)
	c.boot.Close()
	ep := c.ep
	ep.mu.Lock()
	if ep.peers[c.peer] == c {
		delete(ep.peers, c.peer)
	}
	delete(ep.byQPN, c.qp.num())
	ep.mu.Unlock()
	// Flush what is outstanding now; the queue pair itself goes at Close,
	// once nothing can post to it any more.
	c.qp.toError()
}

// grant takes back credits the peer returned, refilling the reserve first.
func (c *rc) grant(n int) {
	if n > 0 && c.reserve.available() == 0 {
		c.reserve.grant(1)
		n--
	}
	c.credit.grant(n)
}

func (c *rc) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// sendMsg sends one message: header, then parts, in a registered send slot.
func (c *rc) sendMsg(ctx context.Context, h msgHeader, parts ...[]byte) error {
	size := msgHeaderSize
	for _, p := range parts {
		size += len(p)
	}
	if size > c.msgSize {
		return fmt.Errorf("%w: message of %d bytes, peer accepts %d", fabric.ErrFrameTooLarge, size, c.msgSize)
	}
	pool := c.credit
	if h.typ == msgCredit {
		pool = c.reserve
	}
	if err := pool.acquire(ctx); err != nil {
		return err
	}
	var slot int
	select {
	case slot = <-c.ep.sendSlots:
	case <-ctx.Done():
		pool.grant(1)
		return ctx.Err()
	}
	defer func() { c.ep.sendSlots <- slot }()
	buf := c.ep.send.buf[slot*c.ep.cfg.MsgSize : slot*c.ep.cfg.MsgSize+size]
	h.credits = c.ret.take()
	h.put(buf)
	off := msgHeaderSize
	for _, p := range parts {
		off += copy(buf[off:], p)
	}
	// The slot is reusable once the send completes, whatever ctx says.
	return c.postAndWait(func(id uint64) error { return c.qp.postSend(id, buf, c.ep.send.lkey()) })
}

// await waits for a posted work request, at most IOTimeout.
func (c *rc) await(w *waiter) error {
	t := time.NewTimer(c.ep.cfg.IOTimeout)
	defer t.Stop()
	select {
	case err := <-w.done:
		return err
	case <-t.C:
		err := fmt.Errorf("%w: %s: work request not completed in %v", fabric.ErrPeerClosed, c.peer, c.ep.cfg.IOTimeout)
		c.fail(err)
		return err
	}
}

func (c *rc) sendCredits(ctx context.Context) {
	if c.ret.owed() == 0 {
		return // a message of ours carried them meanwhile
	}
	if err := c.sendMsg(ctx, msgHeader{typ: msgCredit}); err != nil {
		c.ep.log.Debug("fabric/verbs credit message not sent", "peer", c.peer, "err", err)
	}
}

func (c *rc) deliver(h msgHeader, body []byte) {
	c.mu.Lock()
	ch := c.pending[h.id]
	delete(c.pending, h.id)
	c.mu.Unlock()
	if ch != nil {
		ch <- result{status: h.status, body: body}
	}
}

func (c *rc) call(ctx context.Context, method string, req, resp proto.Message) error {
	if len(method) == 0 || len(method) > 255 {
		return fmt.Errorf("%w: method name of %d bytes", fabric.ErrBadRequest, len(method))
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal request: %w", err)
	}
	if err := c.calls.acquire(ctx); err != nil {
		return err
	}
	defer c.calls.grant(1)
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	h := msgHeader{typ: msgCall, id: id}
	if dl, ok := ctx.Deadline(); ok {
		h.timeout = uint64(max(1, time.Until(dl)))
	}
	if err := c.sendMsg(ctx, h, []byte{byte(len(method))}, []byte(method), body); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return err
	}
	select {
	case r := <-ch:
		if r.status != fabric.CodeOK {
			return fabric.RemoteError(r.status, string(r.body))
		}
		if err := proto.Unmarshal(r.body, resp); err != nil {
			return fmt.Errorf("unmarshal response: %w", err)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	case <-c.done:
		return c.failure()
	}
}

func (c *rc) serveCall(h msgHeader, body []byte) {
	method, req, err := callBody(body)
	var resp proto.Message
	if err == nil {
		resp, err = c.runHandler(h, method, req)
	}
	var out []byte
	if err == nil {
		out, err = proto.Marshal(resp)
	}
	reply := msgHeader{typ: msgReply, id: h.id}
	if err == nil && msgHeaderSize+len(out) > c.msgSize {
		err = fmt.Errorf("%w: response of %d bytes exceeds the caller's limit", fabric.ErrInternal, len(out))
	}
	if err != nil {
		reply.status = fabric.CodeOf(err)
		out = []byte(err.Error())
		if len(out) > c.msgSize-msgHeaderSize {
			out = out[:c.msgSize-msgHeaderSize]
		}
	}
	if err := c.sendMsg(c.ep.ctx, reply, out); err != nil {
		c.ep.log.Debug("fabric/verbs reply not sent", "peer", c.peer, "err", err)
	}
}

func (c *rc) runHandler(h msgHeader, method string, req []byte) (resp proto.Message, err error) {
	fn := c.ep.Lookup(method)
	if fn == nil {
		return nil, fmt.Errorf("%w: %q", fabric.ErrUnknownMethod, method)
	}
	ctx := c.ep.ctx
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(h.timeout))
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, fmt.Errorf("%w: %s panicked: %v", fabric.ErrInternal, method, r)
		}
	}()
	return fn(ctx, c.peer, req)
}

// Call sends req to node's handler for method over SEND/RECV.
func (ep *Endpoint) Call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ep.enter(); err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	defer ep.wg.Done()
	c, err := ep.conn(ctx, node)
	if err == nil {
		err = c.call(ctx, method, req, resp)
	}
	if err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	return nil
}

// oneSided posts ops to node as RDMA READs or WRITEs, in linked chains of at
// most maxChain, staging those whose local buffer is not registered.
func (ep *Endpoint) oneSided(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ep.enter(); err != nil {
		return err
	}
	defer ep.wg.Done()
	c, err := ep.conn(ctx, node)
	if err != nil {
		return err
	}
	write := verb == fabric.VerbWrite
	var direct []rdmaOp
	var staged, empty []fabric.Op
	for _, op := range ops {
		if len(op.Local) == 0 {
			// The NIC checks no key for a zero-length transfer; the peer does.
			empty = append(empty, op)
			continue
		}
		lkey, laddr, ok := ep.findLocal(op.Local)
		if !ok {
			staged = append(staged, op)
			continue
		}
		direct = append(direct, rdmaOp{laddr: laddr, len: uint32(len(op.Local)), lkey: lkey,
			raddr: op.Remote.Offset, rkey: rkeyOf(op.Remote.Key)})
	}
	if len(empty) > 0 {
		if err := ep.diagnose(ctx, node, verb, empty, nil); err != nil {
			return err
		}
	}
	for len(direct) > 0 && err == nil {
		n := min(len(direct), maxChain)
		err = c.rdma(ctx, write, direct[:n])
		direct = direct[n:]
	}
	for _, op := range staged {
		if err != nil {
			break
		}
		err = ep.staged(ctx, c, write, op)
	}
	if errors.Is(err, errRemoteAccess) {
		return ep.diagnose(ctx, node, verb, ops, err)
	}
	return err
}

// maxChain bounds the work requests posted as one chain (the send queue is
// sized for it).
const maxChain = 64

// rdma posts one chain and waits for its completion.
func (c *rc) rdma(ctx context.Context, write bool, ops []rdmaOp) error {
	if err := c.oneSided.acquire(ctx); err != nil {
		return err
	}
	defer c.oneSided.grant(1)
	return c.postAndWait(func(id uint64) error { return c.qp.postRDMA(id, write, ops) })
}

// postAndWait posts one work request (or chain) under a fresh completion id
// and waits for its completion. A posted request cannot be recalled, so the
// wait ignores the caller's context (it is bounded by IOTimeout): when it
// returns, the memory the request named is the caller's again. A failed post
// or an error completion leaves an RC queue pair in the error state, so
// either fails the connection.
func (c *rc) postAndWait(post func(id uint64) error) error {
	id, w, err := c.ep.comps.expect()
	if err != nil {
		return err
	}
	if err := post(id); err != nil {
		c.ep.comps.forget(id)
		c.fail(err)
		return err
	}
	if err := c.await(w); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// staged moves op through the registered bounce buffer, a piece at a time.
func (ep *Endpoint) staged(ctx context.Context, c *rc, write bool, op fabric.Op) error {
	for done := 0; done < len(op.Local); {
		var seg int
		select {
		case seg = <-ep.stageSeg:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := min(ep.piece, len(op.Local)-done)
		buf := ep.stage.buf[seg*ep.piece : seg*ep.piece+n]
		if write {
			copy(buf, op.Local[done:done+n])
		}
		err := c.rdma(ctx, write, []rdmaOp{{laddr: addrOf(buf), len: uint32(n), lkey: ep.stage.lkey(),
			raddr: op.Remote.Offset + uint64(done), rkey: rkeyOf(op.Remote.Key)}})
		if err == nil && !write {
			copy(op.Local[done:done+n], buf)
		}
		ep.stageSeg <- seg
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// checkMethod is the RPC a peer answers to say why it refused a one-sided
// operation: the NIC reports key, bounds and rights failures alike.
const checkMethod = "fabric.verbs.check"

func (ep *Endpoint) serveCheck(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	b := req.Value
	if len(b) != 21 {
		return nil, fmt.Errorf("%w: check of %d bytes", fabric.ErrBadRequest, len(b))
	}
	key, off := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	n, want := binary.LittleEndian.Uint32(b[16:]), fabric.Access(b[20])
	s, err := ep.regions.Acquire(key, off, n, want)
	if err != nil {
		return nil, err
	}
	s.Release()
	return &wrapperspb.BytesValue{}, nil
}

// diagnose asks node which of ops it refuses and returns that error, as
// fabric/tcp would have; the connection the NIC broke is rebuilt on the way.
func (ep *Endpoint) diagnose(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op, cause error) error {
	want := fabric.AccessRemoteRead
	if verb == fabric.VerbWrite {
		want = fabric.AccessRemoteWrite
	}
	for i, op := range ops {
		b := make([]byte, 21)
		binary.LittleEndian.PutUint64(b[0:], op.Remote.Key)
		binary.LittleEndian.PutUint64(b[8:], op.Remote.Offset)
		binary.LittleEndian.PutUint32(b[16:], op.Remote.Len)
		b[20] = byte(want)
		var out wrapperspb.BytesValue
		if err := ep.Call(ctx, node, checkMethod, wrapperspb.Bytes(b), &out); err != nil {
			var fe *fabric.Error
			if errors.As(err, &fe) {
				if len(ops) > 1 {
					return fmt.Errorf("range %d: %w", i, err)
				}
				return err
			}
			if cause == nil {
				return err
			}
			return fmt.Errorf("%w (diagnosis failed: %v)", cause, err)
		}
	}
	return cause
}

// conn returns the connection to node, building one if needed.
func (ep *Endpoint) conn(ctx context.Context, node fabric.NodeID) (*rc, error) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil, fabric.ErrClosed
	}
	c := ep.peers[node]
	ep.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ep.dialMu.Lock()
	defer ep.dialMu.Unlock()
	ep.mu.Lock()
	c = ep.peers[node]
	ep.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ep.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(node))
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", fabric.ErrUnreachable, node, err)
	}
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	_, _, err = handshake.Dial(nc, ep.cfg.Secret, ep.id, ep.limits())
	if err == nil {
		c, err = ep.connect(nc, node)
	}
	if err != nil {
		nc.Close()
		if errors.Is(err, fabric.ErrAuth) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", fabric.ErrUnreachable, node, err)
	}
	return c, nil
}

func (ep *Endpoint) limits() handshake.Limits {
	return handshake.Limits{MaxMessage: uint32(ep.cfg.MsgSize), MaxInFlight: uint32(ep.cfg.CreditsPerPeer)}
}

func (ep *Endpoint) acceptLoop() {
	defer ep.wg.Done()
	for {
		nc, err := ep.ln.Accept()
		if err != nil {
			return
		}
		ep.spawn(func() {
			nc.SetDeadline(time.Now().Add(ep.cfg.DialTimeout))
			id, _, err := handshake.Accept(nc, ep.cfg.Secret, ep.id, ep.limits())
			if err == nil {
				_, err = ep.connect(nc, id)
			}
			if err != nil {
				ep.log.Warn("fabric/verbs connection refused", "remote", nc.RemoteAddr().String(), "err", err)
				nc.Close()
			}
		})
	}
}

// connect exchanges queue-pair parameters over the authenticated bootstrap
// connection, connects the queue pair and files the connection under peer.
func (ep *Endpoint) connect(nc net.Conn, peer fabric.NodeID) (*rc, error) {
	ep.mu.Lock()
	full := len(ep.peers) >= ep.cfg.RecvBuffers/ep.cfg.CreditsPerPeer
	ep.mu.Unlock()
	if full {
		return nil, fmt.Errorf("fabric/verbs: receive buffers for %d peers all granted", len(ep.peers))
	}
	qp, err := ep.dev.createQP(ep.sendDepth)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	ep.qps = append(ep.qps, qp)
	ep.mu.Unlock()
	var psn [4]byte
	rand.Read(psn[:])
	local := qpInfo{
		QPN: qp.num(), PSN: binary.LittleEndian.Uint32(psn[:]) & 0xffffff, LID: ep.dev.lid, GID: ep.dev.gid,
		MTU: ep.dev.mtu, Port: uint8(ep.dev.port), SendCredits: uint16(ep.cfg.CreditsPerPeer),
		MsgSize: uint32(ep.cfg.MsgSize), OneSided: uint16(ep.rdDepth),
	}
	remote, err := exchange(nc, local)
	if err == nil && remote.SendCredits < 2 {
		err = fmt.Errorf("%w: peer grants %d receive buffers, need 2", fabric.ErrProtocol, remote.SendCredits)
	}
	if err == nil {
		err = qp.connect(ep.dev, local, remote)
	}
	if err != nil {
		qp.toError()
		return nil, err
	}
	c := &rc{
		ep: ep, peer: peer, qp: qp, boot: nc,
		credit: newCredits(int(remote.SendCredits) - 1), reserve: newCredits(1),
		calls:    newCredits(max(1, int(remote.SendCredits)/2)),
		oneSided: newCredits(int(min(remote.OneSided, local.OneSided))),
		ret:      newCreditReturn(ep.cfg.CreditsPerPeer), msgSize: min(int(remote.MsgSize), ep.cfg.MsgSize),
		pending: make(map[uint64]chan result), done: make(chan struct{}),
	}
	// File the connection before telling the peer we are ready: its first
	// message may arrive the moment it knows.
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		qp.toError()
		return nil, fabric.ErrClosed
	}
	old := ep.peers[peer]
	ep.peers[peer] = c
	ep.byQPN[qp.num()] = c
	ep.mu.Unlock()
	if old != nil {
		old.fail(errors.New("replaced by a new connection"))
	}
	if _, err = nc.Write([]byte{1}); err == nil {
		var b [1]byte
		_, err = io.ReadFull(nc, b[:])
	}
	if err != nil {
		c.fail(fmt.Errorf("bootstrap: %w", err))
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	// The bootstrap connection stays open: its end is the peer's death.
	ep.spawn(func() {
		io.Copy(io.Discard, nc)
		c.fail(fmt.Errorf("%w: %s: bootstrap connection closed", fabric.ErrPeerClosed, peer))
	})
	return c, nil
}
