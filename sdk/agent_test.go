package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/shmring"
)

// TestMain runs a shmring application in a child process (role
// "agent-client", with an agentClientSpec as JSON).
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"agent-client": func(spec string) error {
		var s agentClientSpec
		if err := json.Unmarshal([]byte(spec), &s); err != nil {
			return fmt.Errorf("child spec: %w", err)
		}
		return runAgentClient(s)
	}, "writer": func(spec string) error {
		var s writerSpec
		if err := json.Unmarshal([]byte(spec), &s); err != nil {
			return fmt.Errorf("child spec: %w", err)
		}
		return runWriter(s)
	}})
}

// agentClientSpec says what a child application does: read random ranges
// of Src (RandBytes(SrcSeed, SrcSize)) and, every WriteEvery entries, write
// the next slice of those bytes to Dst, N entries in all (0: until killed).
type agentClientSpec struct {
	Socket     string
	Src        string
	SrcSeed    uint64
	SrcSize    int
	Dst        string
	N          int
	WriteEvery int
	Huge       bool
}

// agentEntrySize is the bytes each child entry moves: small, so the test
// counts entries rather than bandwidth.
const agentEntrySize = 256

// runAgentClient is the child application. It checks every completion:
// status, length, the bytes in its Iov and their CRC32C. It prints
// "started huge=BOOL" once its rings are handed over, "progress" after its
// first thousand completions, and "ok N" at the end.
func runAgentClient(s agentClientSpec) error {
	const depth, batch = 512, 64
	ctx := context.Background()
	ac, err := DialAgent(s.Socket, depth*agentEntrySize, depth, s.Huge)
	if err != nil {
		return err
	}
	defer ac.Close()
	fmt.Printf("started huge=%v\n", ac.Iov.Huge())
	src, size, err := ac.Open(ctx, s.Src, false)
	if err != nil {
		return err
	}
	if size != int64(s.SrcSize) {
		return fmt.Errorf("%s has %d bytes, want %d", s.Src, size, s.SrcSize)
	}
	var dst uint64
	if s.Dst != "" {
		if dst, err = ac.Create(ctx, s.Dst); err != nil {
			return err
		}
	}
	data := fabrictest.RandBytes(s.SrcSeed, s.SrcSize)
	iov := ac.Iov.Bytes()
	free := make([]uint64, 0, depth)
	for i := range depth {
		free = append(free, uint64(i*agentEntrySize))
	}
	inflight := map[uint64]shmring.Entry{}
	rng := rand.New(rand.NewPCG(s.SrcSeed, 7))
	es := make([]shmring.Entry, 0, batch)
	cs := make([]shmring.Completion, batch)
	submitted, completed, writes := 0, 0, 0
	lastReap := time.Now()
	for completed < s.N || s.N == 0 {
		es = es[:0]
		for len(es) < batch && len(free) > 0 && (submitted+len(es) < s.N || s.N == 0) {
			id := uint64(submitted + len(es))
			slot := free[len(free)-1]
			free = free[:len(free)-1]
			e := shmring.Entry{File: src, Offset: uint64(rng.IntN(s.SrcSize - agentEntrySize)), BufOff: slot,
				Length: agentEntrySize, UserData: id, Op: shmring.OpRead}
			if s.Dst != "" && s.WriteEvery > 0 && id%uint64(s.WriteEvery) == 0 && (writes+1)*agentEntrySize <= s.SrcSize {
				e.File, e.Offset, e.Op = dst, uint64(writes*agentEntrySize), shmring.OpWrite
				copy(iov[slot:slot+agentEntrySize], data[e.Offset:])
				writes++
			}
			es = append(es, e)
		}
		if got := ac.Submit(es); got != len(es) {
			return fmt.Errorf("ring took %d of %d entries with room for all", got, len(es))
		}
		for _, e := range es {
			inflight[e.UserData] = e
		}
		submitted += len(es)
		n := ac.Reap(cs, time.Second) // may wake early, on a bell rung for what it reaped already
		if n > 0 || len(inflight) == 0 {
			lastReap = time.Now()
		} else if time.Since(lastReap) > 5*time.Second {
			return fmt.Errorf("no completion in 5s with %d entries in flight", len(inflight))
		}
		for _, c := range cs[:n] {
			e, ok := inflight[c.UserData]
			if !ok {
				return fmt.Errorf("completion for unknown entry %d", c.UserData)
			}
			delete(inflight, c.UserData)
			b := iov[e.BufOff : e.BufOff+uint64(e.Length)]
			if c.Status != 0 || c.Length != e.Length || c.CRC != chunkio.CRC(b) || !bytes.Equal(b, data[e.Offset:e.Offset+uint64(e.Length)]) {
				return fmt.Errorf("entry %d (op %d at %d): status %d, %d bytes, CRC ok %v, bytes ok %v", c.UserData, e.Op, e.Offset,
					c.Status, c.Length, c.CRC == chunkio.CRC(b), bytes.Equal(b, data[e.Offset:e.Offset+uint64(e.Length)]))
			}
			free = append(free, e.BufOff)
			completed++
			if completed == 1000 {
				fmt.Println("progress")
			}
		}
	}
	if s.Dst != "" {
		if size, err := ac.CloseFile(ctx, dst); err != nil || size != int64(writes*agentEntrySize) {
			return fmt.Errorf("close %s: %d bytes (%v), wrote %d", s.Dst, size, err, writes*agentEntrySize)
		}
	}
	fmt.Println("ok", completed)
	return nil
}

// startAgentClient runs a child application and waits for its first line,
// which it returns.
func startAgentClient(t *testing.T, s agentClientSpec) (*testproc.Proc, string) {
	t.Helper()
	b, _ := json.Marshal(s)
	p := testproc.Start(t, testproc.Command("agent-client", string(b)))
	return p, p.Expect(t, "started", time.Minute)
}

// agentFixture is a cluster, a client, an agent, and a source file.
type agentFixture struct {
	cl    *Client
	agent *Agent
	sock  string
	src   []byte
}

const agentSrcSeed, agentSrcSize = 42, 1 << 20

// agentWriteEvery makes every so many child entries a write: replicated
// writes of small pieces of one chunk are slow (each is a chain update), so
// they are a sprinkling, enough to check the write path end to end.
const agentWriteEvery = 1024

func newAgentFixture(t *testing.T, lease time.Duration) *agentFixture {
	t.Helper()
	cl := testClient(t)
	fx := &agentFixture{cl: cl, sock: filepath.Join(t.TempDir(), "agent.sock"), src: fabrictest.RandBytes(agentSrcSeed, agentSrcSize)}
	f, err := cl.Create(context.Background(), "/src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(fx.src, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fx.agent, err = NewAgent(cl, AgentConfig{Path: fx.sock, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.agent.Close() })
	return fx
}

func (fx *agentFixture) spec(n int, dst string) agentClientSpec {
	return agentClientSpec{Socket: fx.sock, Src: "/src", SrcSeed: agentSrcSeed, SrcSize: agentSrcSize, Dst: dst, N: n, WriteEvery: agentWriteEvery}
}

// checkCopy checks that dst holds a prefix of the source, of want bytes.
func (fx *agentFixture) checkCopy(t *testing.T, dst string, want int64) {
	t.Helper()
	f, err := fx.cl.Open(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want >= 0 && f.Size() != want {
		t.Fatalf("%s: %d bytes, want %d", dst, f.Size(), want)
	}
	got := make([]byte, f.Size())
	if n, _ := f.ReadAt(got, 0); n != len(got) || !bytes.Equal(got, fx.src[:len(got)]) {
		t.Fatalf("%s: read %d of %d bytes, equal=%v", dst, n, len(got), bytes.Equal(got, fx.src[:len(got)]))
	}
}

func waitClients(t *testing.T, a *Agent, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); a.Clients() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent has %d clients, want %d", a.Clients(), want)
		}
	}
}

// TestAgentTwoProcesses: an application process moves entries (random
// reads, with a write every agentWriteEvery-th) through the agent in this process; every
// completion's bytes and CRC check out in the child, and the file it wrote
// reads back here. SLUICE_AGENT_ENTRIES overrides the count (agentEntries:
// 1M, fewer under the race detector).
func TestAgentTwoProcesses(t *testing.T) {
	n := agentEntries
	if v := os.Getenv("SLUICE_AGENT_ENTRIES"); v != "" {
		fmt.Sscan(v, &n)
	}
	fx := newAgentFixture(t, 0)
	start := time.Now()
	p, _ := startAgentClient(t, fx.spec(n, "/dst"))
	if l := p.Skip("progress"); l != fmt.Sprint("ok ", n) {
		t.Fatalf("child said %q: %s", l, p.Stderr())
	}
	if err := p.Cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("%d entries through the agent in %v: %.0f entries/s", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	waitClients(t, fx.agent, 0)
	writes := (n + agentWriteEvery - 1) / agentWriteEvery
	fx.checkCopy(t, "/dst", int64(min(writes, agentSrcSize/agentEntrySize)*agentEntrySize))
}

// TestAgentClientKilled: an application killed mid-batch (SIGKILL, with
// reads and writes in flight) and one frozen (SIGSTOP, its heartbeat goes
// stale with its connection still open) are both reclaimed — the file the
// killed one was writing is closed, so its length is recorded — while the
// agent goes on serving a third application to the end, and a fourth that
// connects afterwards.
func TestAgentClientKilled(t *testing.T) {
	fx := newAgentFixture(t, 500*time.Millisecond)
	killedP, _ := startAgentClient(t, fx.spec(0, "/killed"))
	frozenP, _ := startAgentClient(t, fx.spec(0, ""))
	for _, p := range []*testproc.Proc{killedP, frozenP} {
		p.Expect(t, "progress", time.Minute)
	}
	killed, frozen := killedP.Cmd, frozenP.Cmd
	survivorP, _ := startAgentClient(t, fx.spec(50_000, "/survivor"))
	survivor := survivorP.Cmd
	waitClients(t, fx.agent, 3)
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	waitClients(t, fx.agent, 2)
	if err := frozen.Process.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitClients(t, fx.agent, 1)
	frozen.Process.Kill()
	if l := survivorP.Skip("progress"); l != "ok 50000" {
		t.Fatalf("the surviving child said %q: %s", l, survivorP.Stderr())
	}
	if err := survivor.Wait(); err != nil {
		t.Fatal(err)
	}
	late, _ := startAgentClient(t, fx.spec(5000, ""))
	if l := late.Skip("progress"); l != "ok 5000" || late.Cmd.Wait() != nil {
		t.Fatalf("a child after the deaths said %q: %s", l, late.Stderr())
	}
	waitClients(t, fx.agent, 0)
	in, err := fx.cl.Stat(context.Background(), "/killed")
	if err != nil || in.Size() == 0 || in.Size()%agentEntrySize != 0 {
		t.Fatalf("the killed child's file after reclaim: %v %v", in, err)
	}
	fx.checkCopy(t, "/survivor", -1)
}

// TestAgentHugePages: an application's Iov on huge pages (reserved here,
// as root) and, with none reserved, on normal pages — the fallback — both
// serve entries end to end through the agent.
func TestAgentHugePages(t *testing.T) {
	const knob = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Fatalf("no huge page knob: %v", err)
	}
	defer os.WriteFile(knob, old, 0o644)
	fx := newAgentFixture(t, 0)
	run := func(reserve string, wantHuge bool) {
		t.Helper()
		if err := os.WriteFile(knob, []byte(reserve), 0o644); err != nil {
			t.Skipf("cannot set %s to %s (%v): run as root to test huge pages", knob, reserve, err)
		}
		if got, _ := os.ReadFile(knob); wantHuge && strings.TrimSpace(string(got)) == "0" {
			t.Skip("the kernel reserved no huge pages")
		}
		s := fx.spec(20_000, "")
		s.Huge = true
		p, first := startAgentClient(t, s)
		if first != fmt.Sprintf("started huge=%v", wantHuge) {
			t.Fatalf("with %s huge pages reserved the child said %q", reserve, first)
		}
		if l := p.Skip("progress"); l != "ok 20000" || p.Cmd.Wait() != nil {
			t.Fatalf("with %s huge pages reserved the child said %q: %s", reserve, l, p.Stderr())
		}
	}
	run("0", false)
	run("16", true)
}

// TestAgentBadInput: entries naming files the client never opened, writes
// through read-only handles, offsets no file can have, and ranges outside
// the Iov complete with an errno and touch no byte; malformed control
// messages get clear errors; the file limit holds.
func TestAgentBadInput(t *testing.T) {
	fx := newAgentFixture(t, 0)
	ctx := context.Background()
	ac, err := DialAgent(fx.sock, 64<<10, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if _, _, err := ac.Open(ctx, "/nope", false); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("open of a missing file: %v", err)
	}
	for _, msg := range []string{"not json", `{"op":"format"}`, `{"op":"close","file":99}`} {
		if _, err := ac.Call(ctx, []byte(msg)); err == nil {
			t.Fatalf("control message %s was accepted", msg)
		}
	}
	src, size, err := ac.Open(ctx, "/src", false)
	if err != nil || size != agentSrcSize {
		t.Fatalf("open /src: %d bytes, %v", size, err)
	}
	iov := ac.Iov.Bytes()
	for i := range iov {
		iov[i] = 0xaa
	}
	entries := []shmring.Entry{
		{File: src + 100, Length: 100, UserData: 1, Op: shmring.OpRead},                          // never opened
		{File: src, Length: 100, UserData: 2, Op: shmring.OpWrite},                               // read-only
		{File: src, Offset: 1 << 63, Length: 100, UserData: 3, Op: shmring.OpRead},               // no file is that long
		{File: src, Length: 100, BufOff: uint64(len(iov)) - 50, UserData: 4, Op: shmring.OpRead}, // off the Iov's end
		{File: src, Offset: agentSrcSize + 10, Length: 100, UserData: 5, Op: shmring.OpRead},     // past the file's end: empty
		{File: src, Offset: 4096, Length: 100, BufOff: 1000, UserData: 6, Op: shmring.OpRead},    // good
	}
	want := map[uint64]int32{1: -int32(unix.EBADF), 2: -int32(unix.EBADF), 3: -int32(unix.EFBIG), 4: -int32(unix.EINVAL), 5: 0, 6: 0}
	if ac.Submit(entries) != len(entries) {
		t.Fatal("ring full")
	}
	got := map[uint64]shmring.Completion{}
	cs := make([]shmring.Completion, 8)
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(entries) && time.Now().Before(deadline); {
		n := ac.Reap(cs, 100*time.Millisecond)
		for _, c := range cs[:n] {
			got[c.UserData] = c
		}
	}
	for id, status := range want {
		if c, ok := got[id]; !ok || c.Status != status {
			t.Fatalf("entry %d: completion %+v (arrived %v), want status %d", id, c, ok, status)
		}
	}
	if got[5].Length != 0 || got[6].Length != 100 || got[6].CRC != chunkio.CRC(iov[1000:1100]) || !bytes.Equal(iov[1000:1100], fx.src[4096:4196]) {
		t.Fatalf("good entries: %+v %+v", got[5], got[6])
	}
	for i, b := range iov {
		if b != 0xaa && (i < 1000 || i >= 1100) {
			t.Fatalf("byte %d of the Iov changed outside the good entry's range", i)
		}
	}

	limited, err := NewAgent(fx.cl, AgentConfig{Path: filepath.Join(t.TempDir(), "limited.sock"), MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	lc, err := DialAgent(limited.cfg.Path, 4096, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for i := range 3 {
		_, _, err := lc.Open(ctx, "/src", false)
		if (i < 2) != (err == nil) {
			t.Fatalf("open %d with a limit of 2: %v", i+1, err)
		}
	}
}

// TestAgentBatchBytes: an agent whose reads come over a wire bounds its
// batches' bytes (it checks each batch's bytes itself, best while they are
// in cache); one on an in-process fabric, whose storage nodes check what
// they copy, does not.
func TestAgentBatchBytes(t *testing.T) {
	tr, err := tcp.New(tcp.Config{Secret: []byte("batch bytes")})
	if err != nil {
		t.Fatal(err)
	}
	wire, err := tr.Dialer("wire")
	if err != nil {
		t.Fatal(err)
	}
	defer wire.Close()
	near, err := local.NewNetwork().Dialer("near")
	if err != nil {
		t.Fatal(err)
	}
	defer near.Close()
	if got := agentBatchBytes(wire); got != 2<<20 {
		t.Errorf("over TCP: %d bytes a batch, want 2 MiB", got)
	}
	if got := agentBatchBytes(near); got >= 0 {
		t.Errorf("in process: %d bytes a batch, want no bound", got)
	}
}

// TestAgentHugePageHint: an agent whose clients' memory is on 4 KiB pages
// where the kernel gives shared memory no huge pages says once how to get
// them; where it does, the agent says nothing. (The kernel's setting is
// stood in for: shmring's tests change the real one.)
func TestAgentHugePageHint(t *testing.T) {
	defer func(f func() bool) { transparentHuge = f }(transparentHuge)
	cl := testClient(t)
	for _, tc := range []struct {
		thp   bool
		hints int
	}{{false, 1}, {true, 0}} {
		transparentHuge = func() bool { return tc.thp }
		var logs bytes.Buffer
		sock := filepath.Join(t.TempDir(), "agent.sock")
		a, err := NewAgent(cl, AgentConfig{Path: sock, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // two clients, one hint
			ac, err := DialAgent(sock, 4<<20, 64, false)
			if err != nil {
				t.Fatal(err)
			}
			waitClients(t, a, 1)
			ac.Close()
			waitClients(t, a, 0)
		}
		a.Close()
		if got := strings.Count(logs.String(), "allow transparent ones for shared memory"); got != tc.hints {
			t.Errorf("transparent huge pages %v: %d hints, want %d; log:\n%s", tc.thp, got, tc.hints, logs.String())
		}
	}
}
