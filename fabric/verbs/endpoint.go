//go:build verbs

package verbs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/sluicefs/sluice/fabric"
)

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

func (ep *Endpoint) spawn(fn func()) {
	ep.wg.Add(1)
	go func() {
		defer ep.wg.Done()
		fn()
	}()
}
