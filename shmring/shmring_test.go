package shmring

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicefs/sluice/internal/testproc"
	"golang.org/x/sys/unix"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pattern fills b with what entry (file, offset) reads: a test stand-in for
// storage, so the client can check every byte.
func pattern(b []byte, file, offset uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], file*1_000_003+offset+uint64(i))
	}
}

// serveFill is the test agent's handler.
func serveFill(iov []byte, es []Entry, cs []Completion) {
	for i, e := range es {
		b := iov[e.BufOff : e.BufOff+uint64(e.Length)]
		pattern(b, e.File, e.Offset)
		cs[i] = Completion{UserData: e.UserData, Length: e.Length, CRC: crc32.Checksum(b, castagnoli)}
	}
}

// TestMain runs a ring client in a child process (role "client", spec
// "SOCKET,ENTRIES" with ",forever" to keep going until killed).
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"client": func(spec string) error {
		parts := strings.Split(spec, ",")
		n, _ := strconv.Atoi(parts[1])
		return runClient(parts[0], n, len(parts) > 2)
	}})
}

// runClient submits n 64-byte entries through the agent at path and checks
// every completion's bytes and CRC.
func runClient(path string, n int, forever bool) error {
	const size, depth = 64, 256
	c, err := Dial(path, depth*size, depth, false)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("started")
	es := make([]Entry, 64)
	cs := make([]Completion, 64)
	want := make([]byte, size)
	submitted, completed := 0, 0
	inflight := map[uint64]Entry{}
	// Completions may come out of order (batches are served in parallel):
	// a slot is reused only once its entry completed.
	free := make([]uint64, 0, depth)
	for i := range depth {
		free = append(free, uint64(i*size))
	}
	for completed < n || forever {
		k := 0
		for ; k < len(es) && len(free) > 0 && (submitted+k < n || forever); k++ {
			id := uint64(submitted + k)
			es[k] = Entry{File: id % 7, Offset: id * size, Length: size, BufOff: free[len(free)-1], Op: OpRead, UserData: id}
			free = free[:len(free)-1]
		}
		got := c.Submit(es[:k])
		for _, e := range es[:got] {
			inflight[e.UserData] = e
		}
		for _, e := range es[got:k] {
			free = append(free, e.BufOff)
		}
		submitted += got
		m := c.Reap(cs, time.Second)
		for _, done := range cs[:m] {
			e, ok := inflight[done.UserData]
			if !ok {
				return fmt.Errorf("completion for unknown entry %d", done.UserData)
			}
			delete(inflight, done.UserData)
			b := c.Iov.Bytes()[e.BufOff : e.BufOff+uint64(e.Length)]
			pattern(want, e.File, e.Offset)
			if done.Status != 0 || done.CRC != crc32.Checksum(b, castagnoli) || !bytes.Equal(b, want) {
				return fmt.Errorf("entry %d: status %d, bytes or CRC wrong", done.UserData, done.Status)
			}
			free = append(free, e.BufOff)
			completed++
		}
	}
	fmt.Println("ok", completed)
	return nil
}

func TestSegmentSealedAndFallback(t *testing.T) {
	s, err := NewSegment("test", 10000, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if reserved, _ := os.ReadFile("/proc/sys/vm/nr_hugepages"); strings.TrimSpace(string(reserved)) == "0" && s.Huge() {
		t.Fatal("a huge-page segment with no huge pages reserved")
	}
	if len(s.Bytes())%unix.Getpagesize() != 0 || len(s.Bytes()) < 10000 {
		t.Fatalf("segment of %d bytes", len(s.Bytes()))
	}
	if err := unix.Ftruncate(s.Fd(), int64(len(s.Bytes())*2)); !errors.Is(err, unix.EPERM) {
		t.Fatalf("growing a sealed segment: %v", err)
	}
	if err := unix.Ftruncate(s.Fd(), 1); !errors.Is(err, unix.EPERM) {
		t.Fatalf("shrinking a sealed segment: %v", err)
	}
	fd, _ := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	unix.Ftruncate(fd, 4096)
	if _, err := OpenSegment(fd); err == nil {
		t.Fatal("an unsealed segment was accepted")
	}
	unix.Close(fd)
}

// TestHugePages reserves huge pages (as root) and checks a segment lands on
// them, then gives them back.
func TestHugePages(t *testing.T) {
	const knob = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Skipf("no huge page knob: %v", err)
	}
	if err := os.WriteFile(knob, []byte("8"), 0o644); err != nil {
		t.Skipf("cannot reserve huge pages (%v): run as root to test them", err)
	}
	defer os.WriteFile(knob, old, 0o644)
	if got, _ := os.ReadFile(knob); strings.TrimSpace(string(got)) == "0" {
		t.Skip("the kernel reserved no huge pages")
	}
	s, err := NewSegment("huge", 3<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Huge() || len(s.Bytes()) != 4<<20 {
		t.Fatalf("huge=%v, %d bytes", s.Huge(), len(s.Bytes()))
	}
	o, err := OpenSegment(s.Fd())
	if err != nil {
		t.Fatal(err)
	}
	if !o.Huge() {
		t.Fatal("the receiving side does not see huge pages")
	}
	o.Bytes()[5] = 42
	if s.Bytes()[5] != 42 {
		t.Fatal("the two mappings do not share memory")
	}
	unix.Munmap(o.mem) // o shares s's descriptor
}

func TestRingSPSC(t *testing.T) {
	s, err := NewSegment("ring", RingSize(128), false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := InitRing(s.Bytes(), 128)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AttachRing(make([]byte, 100)); err == nil {
		t.Fatal("garbage attached as a ring")
	}
	const n = 1_000_000
	done := make(chan error, 1)
	go func() { // the agent: take, complete
		es := make([]Entry, 32)
		cs := make([]Completion, 32)
		for got := 0; got < n; {
			k := r.Take(es, 0)
			for i := 0; i < k; i++ {
				if es[i].UserData != uint64(got+i) || es[i].Offset != uint64(got+i)*3 {
					done <- fmt.Errorf("entry %d out of order: %+v", got+i, es[i])
					return
				}
				cs[i] = Completion{UserData: es[i].UserData, Length: uint32(i)}
			}
			for c := 0; c < k; {
				c += r.Complete(cs[c:k])
			}
			got += k
		}
		done <- nil
	}()
	es := make([]Entry, 16)
	cs := make([]Completion, 64)
	sent, reaped := 0, 0
	for reaped < n {
		k := 0
		for ; k < len(es) && sent+k < n; k++ {
			es[k] = Entry{UserData: uint64(sent + k), Offset: uint64(sent+k) * 3}
		}
		sent += r.Submit(es[:k])
		m := r.Reap(cs)
		for _, c := range cs[:m] {
			if c.UserData != uint64(reaped) {
				t.Fatalf("completion %d out of order: %d", reaped, c.UserData)
			}
			reaped++
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func startClient(t *testing.T, path string, n int, forever bool) *testproc.Proc {
	spec := fmt.Sprintf("%s,%d", path, n)
	if forever {
		spec += ",forever"
	}
	p := testproc.Start(t, testproc.Command("client", spec))
	p.Expect(t, "started", time.Minute)
	return p
}

// TestTwoProcesses: a client process moves 1M entries through an agent in
// this process; every completion's bytes and CRC check out.
func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	srv, err := Listen(ServerConfig{Path: path, Handler: serveFill})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := startClient(t, path, 1_000_000, false)
	if l, _ := p.Next(); l != "ok 1000000" {
		t.Fatalf("client said %q: %s", l, p.Stderr())
	}
	if err := p.Cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); srv.Clients() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a closed client was never reclaimed")
		}
	}
}

// TestClientDeath: a client killed mid-batch is reclaimed, and the agent
// keeps serving another client to the end; closing the server with a
// client still connected leaves no goroutine behind.
func TestClientDeath(t *testing.T) {
	before := runtime.NumGoroutine()
	path := filepath.Join(t.TempDir(), "agent.sock")
	srv, err := Listen(ServerConfig{Path: path, Handler: serveFill, Lease: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		lingering := startClient(t, path, 0, true)
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		lingering.Cmd.Process.Kill()
		for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines after Close, %d before Listen", runtime.NumGoroutine(), before)
			}
		}
	}()
	doomed := startClient(t, path, 0, true).Cmd
	survivor := startClient(t, path, 200_000, false)
	time.Sleep(100 * time.Millisecond)
	if srv.Clients() != 2 {
		t.Fatalf("%d clients, want 2", srv.Clients())
	}
	doomed.Process.Kill()
	doomed.Wait()
	for deadline := time.Now().Add(5 * time.Second); srv.Clients() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dead client not reclaimed: %d clients", srv.Clients())
		}
	}
	if l, _ := survivor.Next(); l != "ok 200000" {
		t.Fatalf("surviving client said %q: %s", l, survivor.Stderr())
	}
	if err := survivor.Cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestBadEntries: entries whose range leaves the Iov, or whose op is
// unknown, complete with EINVAL and touch nothing.
func TestBadEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	var touched atomic.Bool
	srv, err := Listen(ServerConfig{Path: path, Handler: func(iov []byte, es []Entry, cs []Completion) {
		if len(es) > 0 {
			touched.Store(true)
		}
		serveFill(iov, es, cs)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := Dial(path, 4096, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := []Entry{
		{BufOff: 4000, Length: 200, UserData: 9, Op: OpRead},       // runs off the end
		{BufOff: 1<<64 - 8, Length: 16, UserData: 10, Op: OpWrite}, // wraps around
		{BufOff: 8192, Length: 0, UserData: 11, Op: OpRead},        // starts past the end
		{BufOff: 0, Length: 8, UserData: 12},                       // no op
		{BufOff: 0, Length: 8, UserData: 13, Op: 7},                // unknown op
	}
	if c.Submit(bad) != len(bad) {
		t.Fatal("ring full")
	}
	cs := make([]Completion, 8)
	var got []Completion
	for deadline := time.Now().Add(5 * time.Second); len(got) < len(bad) && time.Now().Before(deadline); {
		n := c.Reap(cs, 100*time.Millisecond)
		got = append(got, cs[:n]...)
	}
	if len(got) != len(bad) || touched.Load() {
		t.Fatalf("%d completions for %d bad entries, handler ran %v", len(got), len(bad), touched.Load())
	}
	for i, cp := range got {
		if cp.UserData != bad[i].UserData || cp.Status != -int32(unix.EINVAL) {
			t.Fatalf("bad entry %+v completed %+v", bad[i], cp)
		}
	}
}

type echoServing struct{ closed chan struct{} }

func (e echoServing) Serve(_ context.Context, es []Entry, cs []Completion) {
	for i := range es {
		cs[i] = Completion{UserData: es[i].UserData}
	}
}

func (e echoServing) Control(_ context.Context, req []byte) ([]byte, error) {
	if string(req) == "fail" {
		return nil, errors.New("asked to fail")
	}
	if string(req) == "slow" {
		time.Sleep(300 * time.Millisecond)
	}
	return append([]byte("echo "), req...), nil
}

func (e echoServing) Close() error { close(e.closed); return nil }

// TestControl: control messages travel both ways, errors come back as
// CallError, an oversized message is refused on the client's side, a
// refused Attach turns the client away, and Close runs once a client goes.
func TestControl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	closed := make(chan struct{})
	refuse := atomic.Bool{}
	srv, err := Listen(ServerConfig{Path: path, Attach: func(ss *Session) (Serving, error) {
		if refuse.Load() {
			return nil, errors.New("no more clients")
		}
		if len(ss.Iov()) < 4096 || ss.ID() == 0 {
			return nil, fmt.Errorf("session: iov %d bytes, id %d", len(ss.Iov()), ss.ID())
		}
		return echoServing{closed: closed}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := Dial(path, 4096, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if resp, err := c.Call(ctx, []byte("hi")); err != nil || string(resp) != "echo hi" {
		t.Fatalf("call: %q %v", resp, err)
	}
	var ce *CallError
	if _, err := c.Call(ctx, []byte("fail")); !errors.As(err, &ce) || ce.Msg != "asked to fail" {
		t.Fatalf("failing call: %v", err)
	}
	if _, err := c.Call(ctx, make([]byte, maxFrame+1)); err == nil {
		t.Fatal("an oversized control message was sent")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Call(cancelled, []byte("hi")); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a cancelled context: %v", err)
	}
	if _, err := c.Call(ctx, []byte("hi")); err != nil {
		t.Fatalf("a call after one refused before it started: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Call(short, []byte("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline: %v", err)
	}
	if _, err := c.Call(ctx, []byte("hi")); err == nil {
		t.Fatal("a call after one cut short went through on a stream that may be mid-message")
	}
	refuse.Store(true)
	if _, err := Dial(path, 4096, 16, false); err == nil {
		t.Fatal("a refused client was let in")
	}
	c.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Serving.Close never ran for a closed client")
	}
}

// TestTransparentHugePages: where the operator allows huge pages for shared
// memory on advice (as root, the test sets it and puts it back), a segment
// on normal pages gets them through both its mappings, whichever side
// touches the memory first.
func TestTransparentHugePages(t *testing.T) {
	old := ShmemTHPMode()
	if old == "" {
		t.Skip("no transparent huge pages for shared memory here")
	}
	if err := os.WriteFile(ShmemTHP, []byte("advise"), 0o644); err != nil {
		t.Skipf("cannot allow transparent huge pages (%v): run as root to test them", err)
	}
	defer os.WriteFile(ShmemTHP, []byte(old), 0o644)
	s, err := NewSegment("thp", 7<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Huge() || len(s.Bytes()) != 8<<20 {
		t.Fatalf("huge=%v, %d bytes: want normal pages, whole huge pages' worth", s.Huge(), len(s.Bytes()))
	}
	fd, err := unix.Dup(s.Fd())
	if err != nil {
		t.Fatal(err)
	}
	o, err := OpenSegment(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for i := 0; i < len(o.Bytes()); i += 4096 { // the receiving side writes first, as an agent does
		o.Bytes()[i] = byte(i >> 12)
	}
	sum := 0
	for i := 0; i < len(s.Bytes()); i += 4096 {
		sum += int(s.Bytes()[i])
	}
	if sum == 0 {
		t.Fatal("the two mappings do not share memory")
	}
	for _, m := range []*Segment{o, s} {
		if kb := pmdMappedKB(t, m.Bytes()); kb == 0 {
			t.Errorf("mapping at %p: no huge page mapped", &m.Bytes()[0])
		}
	}
}

// pmdMappedKB is how much of the mapping that starts at b this process maps
// with huge pages (ShmemPmdMapped in /proc/self/smaps).
func pmdMappedKB(t *testing.T, b []byte) int {
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&b[0])))
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(line, start)
			continue
		}
		if in && strings.HasPrefix(line, "ShmemPmdMapped:") {
			var kb int
			fmt.Sscanf(strings.TrimPrefix(line, "ShmemPmdMapped:"), "%d", &kb)
			return kb
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}
