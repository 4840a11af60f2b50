package hosts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"serve": serve})
}

// serve is the child that listens in a host. Its spec is "echo ADDR"
// (each connection gets its bytes back) or "sink ADDR" (each connection is
// read to its end, then answered with the count of bytes read).
func serve(spec string) error {
	mode, addr, _ := strings.Cut(spec, " ")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("listening on", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			switch mode {
			case "echo":
				io.Copy(c, c)
			case "sink":
				n, err := io.Copy(io.Discard, c)
				if err == nil {
					fmt.Fprintln(c, n)
				}
			}
		}()
	}
}

const port = 7000

// startServe starts the serve child in h and waits until it listens.
func startServe(t *testing.T, h *Host, mode string) *Proc {
	t.Helper()
	p, err := h.Start(testproc.Command("serve", mode+" "+h.AddrPort(port)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Expect(ctx, "listening on "+h.AddrPort(port)); err != nil {
		t.Fatal(err)
	}
	return p
}

// echo dials addr from h, sends a line and waits up to wait for it to
// come back.
func echo(h *Host, addr string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := h.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	msg := "hello from " + h.Addr.String() + "\n"
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg {
		return fmt.Errorf("echo: got %q, want %q", got, msg)
	}
	return nil
}

func TestEcho(t *testing.T) {
	n := New(t, Config{Hosts: 2})
	a, b := n.Host(0), n.Host(1)
	if a.Addr.String() != "198.18.0.10" || b.Addr.String() != "198.18.0.11" {
		t.Fatalf("addresses %v, %v; want 198.18.0.10, .11", a.Addr, b.Addr)
	}
	startServe(t, a, "echo")
	if err := echo(b, a.AddrPort(port), 5*time.Second); err != nil {
		t.Fatalf("echo from %v to %v: %v", b.Addr, a.Addr, err)
	}
	// The connection really leaves from b's namespace and address.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.Dial(ctx, "tcp", a.AddrPort(port))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LocalAddr().(*net.TCPAddr).IP.String(); got != b.Addr.String() {
		t.Errorf("connection from %s, want %s", got, b.Addr)
	}
	c.Close()
	// Nothing outside the subnet is reachable from a host: no route.
	_, err = b.Dial(ctx, "tcp", "192.0.2.1:80")
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("dial outside the subnet: %v, want network unreachable", err)
	}
	// Nor is the machine's own loopback: a host's is its own.
	if err := echo(b, "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		t.Error("a host reached a listener on another namespace's loopback")
	}
}

func TestPartition(t *testing.T) {
	n := New(t, Config{Hosts: 3})
	a, b, c := n.Host(0), n.Host(1), n.Host(2)
	startServe(t, a, "echo")
	addr := a.AddrPort(port)
	const cut = 500 * time.Millisecond
	if err := echo(b, addr, 5*time.Second); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	conn, err := b.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if err := b.Isolate(); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, cut); !isTimeout(err) {
		t.Errorf("isolated: echo %v, want a timeout", err)
	}
	// An open connection goes silent too.
	conn.SetDeadline(time.Now().Add(cut))
	io.WriteString(conn, "x\n")
	if _, err := bufio.NewReader(conn).ReadString('\n'); !isTimeout(err) {
		t.Errorf("isolated: open connection read %v, want a timeout", err)
	}
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, 5*time.Second); err != nil {
		t.Errorf("healed: %v", err)
	}

	// A partition between two peers leaves the third alone.
	if err := a.Block(b); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, cut); !isTimeout(err) {
		t.Errorf("b blocked at a: echo %v, want a timeout", err)
	}
	if err := echo(c, addr, 5*time.Second); err != nil {
		t.Errorf("b blocked at a: c's echo %v", err)
	}
	if err := a.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, 5*time.Second); err != nil {
		t.Errorf("a healed: %v", err)
	}

	// A link down.
	if err := a.SetLink(false); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, cut); err == nil {
		t.Error("a's link down: echo went through")
	}
	if err := a.SetLink(true); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, 5*time.Second); err != nil {
		t.Errorf("a's link up: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// send pushes size bytes from h to the sink at addr and returns the rate
// it saw, in bytes per second, once the sink has counted them all.
func send(t *testing.T, h *Host, addr string, size int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 256<<10)
	start := time.Now()
	for sent := 0; sent < size; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if got, _ := strconv.Atoi(strings.TrimSpace(reply)); got != size {
		t.Fatalf("the sink counted %q bytes, want %d", reply, size)
	}
	return float64(size) / took.Seconds()
}

func TestRate(t *testing.T) {
	n := New(t, Config{Hosts: 2})
	a, b := n.Host(0), n.Host(1)
	startServe(t, a, "sink")
	addr := a.AddrPort(port)
	const size = 16 << 20
	free := send(t, b, addr, size)

	const cap = 20e6
	if err := b.SetRate(cap); err != nil {
		t.Fatal(err)
	}
	if b.Rate() != cap {
		t.Errorf("Rate %d, want %d", b.Rate(), int64(cap))
	}
	capped := send(t, b, addr, size)
	t.Logf("uncapped %.0f MB/s, capped at %.0f MB/s: %.1f MB/s", free/1e6, cap/1e6, capped/1e6)
	if capped > 2*cap {
		t.Errorf("capped at %.0f MB/s, sent at %.1f MB/s", cap/1e6, capped/1e6)
	}
	if free < 2*capped {
		t.Errorf("uncapped %.1f MB/s is not clearly faster than capped %.1f MB/s", free/1e6, capped/1e6)
	}

	// Lifted again while a connection is open, the cap is gone.
	if err := b.SetRate(0); err != nil {
		t.Fatal(err)
	}
	if again := send(t, b, addr, size); again < 2*capped {
		t.Errorf("cap lifted: %.1f MB/s, capped was %.1f MB/s", again/1e6, capped/1e6)
	}
}

func TestProcess(t *testing.T) {
	n := New(t, Config{Hosts: 2})
	a, b := n.Host(0), n.Host(1)
	p := startServe(t, a, "echo")
	addr := a.AddrPort(port)

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	// The kernel still accepts the connection; nobody answers it.
	if err := echo(b, addr, 300*time.Millisecond); !isTimeout(err) {
		t.Errorf("paused: echo %v, want a timeout", err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := echo(b, addr, 5*time.Second); err != nil {
		t.Errorf("resumed: %v", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("killed: Wait %v", err)
	}
	if err := echo(b, addr, 5*time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("killed: echo %v, want connection refused", err)
	}

	// What a process prints is kept.
	q, err := b.Start(exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := q.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("exit: %v, want status 3", err)
	}
	if out := q.Output(); !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Errorf("output %q, want out and err", out)
	}
	// And it ran in b's namespace: eth0 has b's address.
	r, err := b.Start(exec.Command("ip", "-4", "-o", "addr", "show", "dev", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(); err != nil || !strings.Contains(r.Output(), b.Addr.String()+"/24") {
		t.Errorf("ip addr in b: %v: %q, want %s", err, r.Output(), b.Addr)
	}
	// With no IPv6 address, nothing gets around the IPv4 partitions.
	r, err = b.Start(exec.Command("ip", "-6", "-o", "addr", "show"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(); err != nil || strings.TrimSpace(r.Output()) != "" {
		t.Errorf("ip -6 addr in b: %v: %q, want none", err, r.Output())
	}
}

func TestCloseRemovesAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	// A run that crashed left these behind: its pid cannot be running
	// (above the largest pid_max), and one name says no owner at all.
	stale := []string{fmt.Sprintf("%s%d-1-br", Prefix, 1<<22+1), Prefix + "leftover"}
	for _, name := range stale {
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Skipf("cannot make network namespaces: ip netns add: %v: %s", err, out)
		}
	}
	t.Cleanup(func() {
		for _, name := range stale {
			exec.Command("ip", "netns", "delete", name).Run()
		}
	})
	n, err := Open(Config{Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	mine := n.bridge[:strings.LastIndexByte(n.bridge, '-')+1] // slh-<pid>-<n>-
	names, err := Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		if slices.Contains(names, name) {
			t.Errorf("the stale namespace %s is still there after Open", name)
		}
	}
	var ours []string
	for _, name := range names {
		if strings.HasPrefix(name, mine) {
			ours = append(ours, name)
		}
	}
	if len(ours) != 4 {
		t.Errorf("namespaces %v, want the bridge's and 3 hosts'", ours)
	}
	p, err := n.Host(2).Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Close returned with its process running")
	}
	if names, err = Namespaces(); err != nil {
		t.Fatal(err)
	}
	// Other test processes on the machine may have Nets of their own.
	if left := slices.DeleteFunc(names, func(name string) bool { return !strings.HasPrefix(name, mine) }); len(left) != 0 {
		t.Errorf("namespaces left after Close: %v", left)
	}
	if _, err := n.Host(0).Start(exec.Command("true")); err == nil {
		t.Error("Start after Close succeeded")
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
