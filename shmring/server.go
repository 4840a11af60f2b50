package shmring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Serving is what the agent does for one client. Serve gets batches of
// entries that are already checked (a known op, a range inside the Iov)
// and fills one completion per entry; Control answers the client's control
// messages. They may run at the same time — Serve for several batches at
// once (ServerConfig.Inflight) and Control on the connection's goroutine —
// and both get a context that ends when
// the client dies or the server closes. Close runs once, after both have
// returned for good: it must leave nothing that still touches the Iov,
// since the segment is unmapped right after.
type Serving interface {
	Serve(ctx context.Context, es []Entry, cs []Completion)
	Control(ctx context.Context, req []byte) ([]byte, error)
	Close() error
}

// Handler serves a batch of entries against a client's Iov, filling one
// completion per entry: the simple form of Serving, with no control
// messages and nothing to release.
type Handler func(iov []byte, es []Entry, cs []Completion)

// ServerConfig configures the agent's side.
type ServerConfig struct {
	// Path is the unix socket clients dial.
	Path string
	// Attach starts serving a client whose segments were just mapped; an
	// error refuses the client. When nil, Handler serves every client.
	Attach  func(*Session) (Serving, error)
	Handler Handler
	// Lease is how stale a client's heartbeat may get before the client is
	// taken for dead (default 2s). A closed connection is death at once.
	Lease time.Duration
	// Batch is how many entries are taken at a time (default 64), and
	// BatchBytes, when not 0, stops a batch at the entry that brings the
	// bytes its entries name to it (a batch always takes one entry).
	Batch      int
	BatchBytes uint64
	// Inflight is how many batches of one client may be served at once
	// (default 4), so that a slow entry (a replicated write) does not hold
	// back the batches behind it. Completions of different batches may
	// come out of submission order; UserData tells them apart.
	Inflight int
	Logger   *slog.Logger
}

// Server accepts clients and serves their rings.
type Server struct {
	cfg ServerConfig
	ln  *net.UnixListener

	mu      sync.Mutex
	clients map[*Session]struct{}
	pending map[*net.UnixConn]struct{} // accepted, not yet admitted
	closed  bool
	nextID  uint64
	wg      sync.WaitGroup
}

// Session is one client as the agent sees it: the segments it handed over,
// mapped here, and its bells and connection.
type Session struct {
	id       uint64
	iov, ior *Segment
	ring     *Ring
	sq, cq   *Bell
	conn     *net.UnixConn
	serving  Serving

	// ctx ends when the client dies (connection closed, heartbeat stale)
	// or the server closes.
	ctx    context.Context
	cancel context.CancelFunc
	// controlDone is closed when the connection's goroutine has returned.
	controlDone chan struct{}
	// cqMu makes the batches completing at once one producer of the
	// completion queue.
	cqMu sync.Mutex
}

// batch is the memory one batch in flight uses.
type batch struct {
	es    []Entry
	cs    []Completion
	valid []Entry // the entries that pass the checks
	idx   []int   // their places in es
	vcs   []Completion
}

// ID tells sessions apart in logs.
func (ss *Session) ID() uint64 { return ss.id }

// Iov is the client's data buffer, mapped in this process.
func (ss *Session) Iov() []byte { return ss.iov.Bytes() }

// Huge reports whether the client's Iov is on huge pages.
func (ss *Session) Huge() bool { return ss.iov.Huge() }

// Listen starts the agent's side at cfg.Path.
func Listen(cfg ServerConfig) (*Server, error) {
	if cfg.Attach == nil && cfg.Handler == nil {
		return nil, errors.New("shmring: a server needs Attach or Handler")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Inflight <= 0 {
		cfg.Inflight = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	os.Remove(cfg.Path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shmring: listen %s: %w", cfg.Path, err)
	}
	s := &Server{cfg: cfg, ln: ln, clients: map[*Session]struct{}{}, pending: map[*net.UnixConn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Clients is how many clients are being served.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.pending[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.admit(conn)
	}
}

// admit takes a new client's segments and starts serving it, or turns it
// away; a slow client holds up no other.
func (s *Server) admit(conn *net.UnixConn) {
	defer s.wg.Done()
	ss, err := s.handshake(conn)
	if err == nil {
		s.mu.Lock()
		s.nextID++
		ss.id = s.nextID
		s.mu.Unlock()
		if ss.serving, err = s.attach(ss); err != nil {
			ss.release()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, conn)
	if err == nil && s.closed {
		ss.serving.Close()
		ss.release()
		return
	}
	if err != nil {
		s.cfg.Logger.Warn("shmring client refused", "err", err)
		conn.Write([]byte{1})
		conn.Close()
		return
	}
	s.clients[ss] = struct{}{}
	s.wg.Add(2)
	conn.Write([]byte{0})
	go s.control(ss)
	go s.serve(ss)
}

func (s *Server) attach(ss *Session) (Serving, error) {
	if s.cfg.Attach == nil {
		return handlerServing{h: s.cfg.Handler, iov: ss.iov.Bytes()}, nil
	}
	sv, err := s.cfg.Attach(ss)
	if err != nil {
		return nil, fmt.Errorf("shmring: attach client: %w", err)
	}
	return sv, nil
}

type handlerServing struct {
	h   Handler
	iov []byte
}

func (h handlerServing) Serve(_ context.Context, es []Entry, cs []Completion) { h.h(h.iov, es, cs) }
func (h handlerServing) Control(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("this agent takes no control messages")
}
func (h handlerServing) Close() error { return nil }

func (s *Server) handshake(conn *net.UnixConn) (*Session, error) {
	buf := make([]byte, len(helloMsg))
	oob := make([]byte, unix.CmsgSpace(4*4))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("shmring: read hello: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		fds, _ = unix.ParseUnixRights(&msgs[0])
	}
	closeFrom := func(i int) {
		for _, fd := range fds[i:] {
			unix.Close(fd)
		}
	}
	if string(buf[:n]) != helloMsg || len(fds) != 4 {
		closeFrom(0)
		return nil, fmt.Errorf("shmring: bad hello (%q, %d descriptors)", buf[:n], len(fds))
	}
	ss := &Session{conn: conn, controlDone: make(chan struct{})}
	ss.ctx, ss.cancel = context.WithCancel(context.Background())
	if ss.iov, err = OpenSegment(fds[0]); err != nil {
		closeFrom(0)
		return nil, fmt.Errorf("shmring: client's Iov: %w", err)
	}
	if ss.ior, err = OpenSegment(fds[1]); err != nil {
		ss.iov.Close()
		closeFrom(1)
		return nil, fmt.Errorf("shmring: client's rings: %w", err)
	}
	ss.sq, ss.cq = OpenBell(fds[2]), OpenBell(fds[3])
	if ss.ring, err = AttachRing(ss.ior.Bytes()); err != nil {
		ss.release()
		return nil, err
	}
	return ss, nil
}

// control answers the client's control messages until its connection
// ends, which is how a client's death is noticed at once.
func (s *Server) control(ss *Session) {
	defer s.wg.Done()
	defer close(ss.controlDone)
	defer ss.cancel()
	for {
		_, req, err := readFrame(ss.conn)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ss.ctx.Err() == nil {
				s.cfg.Logger.Warn("shmring: client's control stream broken; reclaiming", "client", ss.id, "err", err)
			}
			return
		}
		status, resp := byte(0), []byte(nil)
		resp, err = ss.serving.Control(ss.ctx, req)
		if err != nil {
			status, resp = 1, []byte(err.Error())
		}
		if err := writeFrame(ss.conn, status, resp); err != nil {
			return
		}
	}
}

// serve takes entries in batches, up to Inflight batches at a time, and
// completes them until the client dies or the server closes; then it waits
// for the batches in flight and reclaims the client's rings and buffers.
func (s *Server) serve(ss *Session) {
	defer s.wg.Done()
	defer s.reclaim(ss)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	free := make(chan *batch, s.cfg.Inflight)
	for range s.cfg.Inflight {
		free <- &batch{es: make([]Entry, s.cfg.Batch), cs: make([]Completion, s.cfg.Batch),
			valid: make([]Entry, 0, s.cfg.Batch), idx: make([]int, 0, s.cfg.Batch), vcs: make([]Completion, s.cfg.Batch)}
	}
	for {
		var b *batch
		select {
		case b = <-free:
		case <-ss.ctx.Done():
			return
		}
		n := ss.ring.Take(b.es, s.cfg.BatchBytes)
		if n == 0 {
			free <- b
			if time.Since(ss.ring.LastBeat()) > s.cfg.Lease {
				s.cfg.Logger.Warn("shmring client stopped beating; reclaiming", "client", ss.id)
				return
			}
			ss.sq.Wait(50)
			continue
		}
		inflight.Go(func() {
			defer func() { free <- b }()
			s.handle(ss, b, n)
			s.complete(ss, b.cs[:n])
		})
	}
}

// complete posts completions, waiting while the client's completion queue
// is full; a dead client's completions are dropped, never written.
func (s *Server) complete(ss *Session, cs []Completion) {
	ss.cqMu.Lock()
	defer ss.cqMu.Unlock()
	for done := 0; done < len(cs); {
		if ss.ctx.Err() != nil {
			return
		}
		done += ss.ring.Complete(cs[done:])
		ss.cq.Ring()
		if done < len(cs) {
			time.Sleep(time.Millisecond) // its completion queue is full
		}
	}
}

// handle passes the entries with a known op on a range inside the Iov to
// the client's Serving; the others complete with EINVAL and never touch
// memory.
func (s *Server) handle(ss *Session, b *batch, n int) {
	iovLen := len(ss.iov.Bytes())
	valid, idx := b.valid[:0], b.idx[:0]
	for i, e := range b.es[:n] {
		if !e.valid(iovLen) {
			b.cs[i] = Completion{UserData: e.UserData, Status: -int32(unix.EINVAL)}
			continue
		}
		valid, idx = append(valid, e), append(idx, i)
	}
	if len(valid) == 0 {
		return
	}
	vcs := b.vcs[:len(valid)]
	ss.serving.Serve(ss.ctx, valid, vcs)
	for j, i := range idx {
		b.cs[i] = vcs[j]
	}
}

// reclaim ends a session: it stops the connection's goroutine, lets the
// Serving let go of the Iov, then unmaps the segments.
func (s *Server) reclaim(ss *Session) {
	ss.cancel()
	ss.conn.Close()
	<-ss.controlDone
	if err := ss.serving.Close(); err != nil {
		s.cfg.Logger.Warn("shmring: releasing a client", "client", ss.id, "err", err)
	}
	s.mu.Lock()
	delete(s.clients, ss)
	s.mu.Unlock()
	ss.release()
}

func (ss *Session) release() {
	closeEnds(ss.iov, ss.ior, ss.sq, ss.cq)
	ss.conn.Close()
}

// Close stops accepting, ends every session and waits for its goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ss := range s.clients {
		ss.cancel()
		ss.conn.Close()
	}
	for conn := range s.pending {
		conn.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
