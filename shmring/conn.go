package shmring

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Hand-over: the client sends "SLSH1" with four descriptors attached
// (SCM_RIGHTS): Iov segment, Ior segment, submission bell, completion bell.
// The agent answers one byte: 0 when it took them.
const helloMsg = "SLSH1"

// Client is an application's end: its Iov (the data buffer the agent reads
// and writes), its Ior (the rings), the two bells, and the connection whose
// end tells the agent it died.
type Client struct {
	Iov  *Segment
	ior  *Segment
	Ring *Ring
	sq   *Bell // rung by the client after submitting
	cq   *Bell // rung by the agent after completing
	conn *net.UnixConn

	stop chan struct{}
	done chan struct{}
}

// Dial connects to the agent at path with an Iov of iovSize bytes and rings
// of depth entries, on huge pages when wantHuge and reserved.
func Dial(path string, iovSize, depth int, wantHuge bool) (*Client, error) {
	c := &Client{stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	fail := func(err error) (*Client, error) {
		c.release()
		return nil, err
	}
	if c.Iov, err = NewSegment("sluice-iov", iovSize, wantHuge); err != nil {
		return fail(err)
	}
	if c.ior, err = NewSegment("sluice-ior", RingSize(depth), false); err != nil {
		return fail(err)
	}
	if c.Ring, err = InitRing(c.ior.Bytes(), depth); err != nil {
		return fail(err)
	}
	c.Ring.Beat(time.Now())
	if c.sq, err = NewBell(); err != nil {
		return fail(err)
	}
	if c.cq, err = NewBell(); err != nil {
		return fail(err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("shmring: dial agent %s: %w", path, err))
	}
	c.conn = conn
	rights := unix.UnixRights(c.Iov.Fd(), c.ior.Fd(), c.sq.Fd(), c.cq.Fd())
	if _, _, err := conn.WriteMsgUnix([]byte(helloMsg), rights, nil); err != nil {
		return fail(fmt.Errorf("shmring: hand over segments: %w", err))
	}
	var ack [1]byte
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(ack[:]); err != nil || ack[0] != 0 {
		return fail(fmt.Errorf("shmring: agent refused the segments (%v)", err))
	}
	conn.SetReadDeadline(time.Time{})
	go c.heartbeat()
	return c, nil
}

// heartbeat keeps the ring's heartbeat fresh while the client lives.
func (c *Client) heartbeat() {
	defer close(c.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.Ring.Beat(now)
		}
	}
}

// Submit queues entries and rings the agent; it returns how many fit.
func (c *Client) Submit(es []Entry) int {
	n := c.Ring.Submit(es)
	if n > 0 {
		c.sq.Ring()
	}
	return n
}

// Reap returns completions, waiting up to timeout for the first.
func (c *Client) Reap(cs []Completion, timeout time.Duration) int {
	if n := c.Ring.Reap(cs); n > 0 {
		return n
	}
	c.cq.Wait(int(timeout / time.Millisecond))
	return c.Ring.Reap(cs)
}

func (c *Client) release() {
	for _, s := range []*Segment{c.Iov, c.ior} {
		if s != nil {
			s.Close()
		}
	}
	for _, b := range []*Bell{c.sq, c.cq} {
		if b != nil {
			b.Close()
		}
	}
	if c.conn != nil {
		c.conn.Close()
	}
}

// Close ends the session; the agent reclaims its side.
func (c *Client) Close() error {
	close(c.stop)
	<-c.done
	c.release()
	return nil
}

// Handler serves a batch of entries against a client's Iov, filling one
// completion per entry.
type Handler func(iov []byte, es []Entry, cs []Completion)

// ServerConfig configures the agent's side.
type ServerConfig struct {
	// Path is the unix socket clients dial.
	Path string
	// Handler serves entries.
	Handler Handler
	// Lease is how stale a client's heartbeat may get before the client is
	// taken for dead (default 2s). A closed connection is death at once.
	Lease time.Duration
	// Batch is how many entries are taken at a time (default 64).
	Batch  int
	Logger *slog.Logger
}

// Server accepts clients and serves their rings.
type Server struct {
	cfg ServerConfig
	ln  *net.UnixListener

	mu      sync.Mutex
	clients map[*session]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type session struct {
	iov, ior *Segment
	ring     *Ring
	sq, cq   *Bell
	conn     *net.UnixConn
	gone     chan struct{} // closed when the connection ends
	stop     chan struct{}
}

// Listen starts the agent's side at cfg.Path.
func Listen(cfg ServerConfig) (*Server, error) {
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	os.Remove(cfg.Path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shmring: listen %s: %w", cfg.Path, err)
	}
	s := &Server{cfg: cfg, ln: ln, clients: map[*session]struct{}{}}
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
		ss, err := s.handshake(conn)
		if err != nil {
			s.cfg.Logger.Warn("shmring client refused", "err", err)
			conn.Write([]byte{1})
			conn.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			ss.release()
			return
		}
		s.clients[ss] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		conn.Write([]byte{0})
		go s.watch(ss)
		go s.serve(ss)
	}
}

func (s *Server) handshake(conn *net.UnixConn) (*session, error) {
	buf := make([]byte, len(helloMsg))
	oob := make([]byte, unix.CmsgSpace(4*4))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		fds, _ = unix.ParseUnixRights(&msgs[0])
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if string(buf[:n]) != helloMsg || len(fds) != 4 {
		closeAll()
		return nil, fmt.Errorf("bad hello (%q, %d descriptors)", buf[:n], len(fds))
	}
	ss := &session{conn: conn, gone: make(chan struct{}), stop: make(chan struct{})}
	if ss.iov, err = OpenSegment(fds[0]); err != nil {
		closeAll()
		return nil, err
	}
	if ss.ior, err = OpenSegment(fds[1]); err != nil {
		ss.iov.Close()
		unix.Close(fds[2])
		unix.Close(fds[3])
		unix.Close(fds[1])
		return nil, err
	}
	ss.sq, ss.cq = OpenBell(fds[2]), OpenBell(fds[3])
	if ss.ring, err = AttachRing(ss.ior.Bytes()); err != nil {
		ss.release()
		return nil, err
	}
	return ss, nil
}

// watch notices the client's connection ending.
func (s *Server) watch(ss *session) {
	defer s.wg.Done()
	var b [1]byte
	ss.conn.Read(b[:])
	close(ss.gone)
}

// serve takes entries in batches and completes them until the client dies
// or the server closes; then it reclaims the client's rings and buffers.
func (s *Server) serve(ss *session) {
	defer s.wg.Done()
	defer s.reclaim(ss)
	es := make([]Entry, s.cfg.Batch)
	cs := make([]Completion, s.cfg.Batch)
	for {
		select {
		case <-ss.gone:
			return
		case <-ss.stop:
			return
		default:
		}
		n := ss.ring.Take(es)
		if n == 0 {
			if time.Since(ss.ring.LastBeat()) > s.cfg.Lease {
				s.cfg.Logger.Warn("shmring client stopped beating; reclaiming")
				return
			}
			ss.sq.Wait(50)
			continue
		}
		s.handle(ss.iov.Bytes(), es[:n], cs[:n])
		for done := 0; done < n; {
			select {
			case <-ss.gone:
				return // a dead client's completions are dropped, never written
			default:
			}
			done += ss.ring.Complete(cs[done:n])
			ss.cq.Ring()
			if done < n {
				time.Sleep(time.Millisecond) // its completion queue is full
			}
		}
	}
}

// handle passes the entries whose ranges lie inside the Iov to the
// handler; the others complete with EINVAL and never touch memory.
func (s *Server) handle(iov []byte, es []Entry, cs []Completion) {
	valid, idx := make([]Entry, 0, len(es)), make([]int, 0, len(es))
	for i, e := range es {
		if uint64(e.BufOff)+uint64(e.Length) > uint64(len(iov)) {
			cs[i] = Completion{UserData: e.UserData, Status: -int32(unix.EINVAL)}
			continue
		}
		valid, idx = append(valid, e), append(idx, i)
	}
	vcs := make([]Completion, len(valid))
	s.cfg.Handler(iov, valid, vcs)
	for j, i := range idx {
		cs[i] = vcs[j]
	}
}

func (s *Server) reclaim(ss *session) {
	s.mu.Lock()
	delete(s.clients, ss)
	s.mu.Unlock()
	ss.release()
}

func (ss *session) release() {
	for _, seg := range []*Segment{ss.iov, ss.ior} {
		if seg != nil {
			seg.Close()
		}
	}
	for _, b := range []*Bell{ss.sq, ss.cq} {
		if b != nil {
			b.Close()
		}
	}
	ss.conn.Close()
}

// Close stops accepting, ends every session and waits for its goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ss := range s.clients {
		close(ss.stop)
		ss.conn.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
