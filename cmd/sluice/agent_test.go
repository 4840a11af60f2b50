package main

import (
	"bytes"
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
	"github.com/sluicefs/sluice/shmring"
)

// TestAgentCommand: `sluice agent` as its own process serves an
// application (this test) over shared-memory rings: a file created, written
// and read back through the agent, which its client's metrics on --http
// count; the agent stops cleanly on SIGTERM, its HTTP server with it.
func TestAgentCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	httpAddr := testproc.FreeAddr(t)
	proc := startProc(t, "agent serving at "+sock, "agent", "--socket", sock, "--cluster", c.Addr, "--token", c.Token, "--http", httpAddr)
	throughAgent(t, ctx, sock)
	mfs := scrapeOK(t, httpAddr, "")
	for _, name := range []string{"sluice_client_read_bytes_total", "sluice_client_write_bytes_total", "sluice_client_reads_total"} {
		if v := sumOf(mfs, name); v <= 0 {
			t.Errorf("agent's %s is %v after reads and writes through it", name, v)
		}
	}
	proc.Process.Signal(syscall.SIGTERM)
	if err := proc.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v", err)
	}
	if _, _, err := get("http://"+httpAddr+"/healthz", ""); err == nil {
		t.Error("the agent's HTTP server answers after the agent stopped")
	}
}

// TestDevAgent: `sluice dev` hosts the local agent on its in-process
// fabric; an application in another process reads and writes through it,
// and dev stops cleanly on SIGTERM.
func TestDevAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	proc := startProc(t, "export SLUICE_CLUSTER=", "dev", "--dir", dir, "--listen", "127.0.0.1:0", "--agent-socket", sock)
	throughAgent(t, ctx, sock)
	proc.Process.Signal(syscall.SIGTERM)
	if err := proc.Wait(); err != nil {
		t.Fatalf("dev after SIGTERM: %v", err)
	}
}

// throughAgent writes a file through the agent at sock and reads part of it
// back, checking completions and bytes.
func throughAgent(t *testing.T, ctx context.Context, sock string) {
	t.Helper()
	ac, err := sdk.DialAgent(sock, 1<<20, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	f, err := ac.Create(ctx, "/via-agent")
	if err != nil {
		t.Fatal(err)
	}
	data := fabrictest.RandBytes(3, 300<<10)
	iov := ac.Iov.Bytes()
	copy(iov, data)
	reap := func(want int) []shmring.Completion {
		t.Helper()
		var got []shmring.Completion
		cs := make([]shmring.Completion, 8)
		for deadline := time.Now().Add(10 * time.Second); len(got) < want && time.Now().Before(deadline); {
			n := ac.Reap(cs, 100*time.Millisecond)
			got = append(got, cs[:n]...)
		}
		if len(got) != want {
			t.Fatalf("%d completions, want %d", len(got), want)
		}
		return got
	}
	ac.Submit([]shmring.Entry{{File: f, Offset: 0, Length: uint32(len(data)), BufOff: 0, Op: shmring.OpWrite, UserData: 1}})
	if c := reap(1)[0]; c.Status != 0 || c.Length != uint32(len(data)) || c.CRC != chunkio.CRC(data) {
		t.Fatalf("write completion %+v", c)
	}
	if size, err := ac.CloseFile(ctx, f); err != nil || size != int64(len(data)) {
		t.Fatalf("close: %d bytes, %v", size, err)
	}
	r, size, err := ac.Open(ctx, "/via-agent", false)
	if err != nil || size != int64(len(data)) {
		t.Fatalf("open: %d bytes, %v", size, err)
	}
	ac.Submit([]shmring.Entry{{File: r, Offset: 1000, Length: 200_000, BufOff: 512 << 10, Op: shmring.OpRead, UserData: 2}})
	got := iov[512<<10 : 512<<10+200_000]
	if c := reap(1)[0]; c.Status != 0 || c.Length != 200_000 || c.CRC != chunkio.CRC(got) || !bytes.Equal(got, data[1000:201_000]) {
		t.Fatalf("read completion %+v, bytes equal %v", c, bytes.Equal(got, data[1000:201_000]))
	}
}

// agentReadAll reads name whole through the agent behind ac, 1 MiB an
// entry with up to 32 in flight, and checks every completion's status,
// length and CRC and every byte against want.
func agentReadAll(t *testing.T, ac *sdk.AgentConn, name string, want []byte) {
	t.Helper()
	const piece, slots = 1 << 20, 32
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, size, err := ac.Open(ctx, name, false)
	if err != nil || size != int64(len(want)) {
		t.Fatalf("open %s through the agent: %d bytes, %v", name, size, err)
	}
	defer ac.CloseFile(ctx, f)
	iov := ac.Iov.Bytes()
	if len(iov) < slots*piece {
		t.Fatalf("Iov of %d bytes", len(iov))
	}
	free := make([]uint64, 0, slots)
	for i := range slots {
		free = append(free, uint64(i*piece))
	}
	inflight := map[uint64]shmring.Entry{}
	cs := make([]shmring.Completion, slots)
	for next, done := 0, 0; done < len(want); {
		var es []shmring.Entry
		for ; len(free) > 0 && next < len(want); next += piece {
			n := min(piece, len(want)-next)
			e := shmring.Entry{File: f, Offset: uint64(next), Length: uint32(n), BufOff: free[len(free)-1], UserData: uint64(next), Op: shmring.OpRead}
			free = free[:len(free)-1]
			es = append(es, e)
			inflight[e.UserData] = e
		}
		if ac.Submit(es) != len(es) {
			t.Fatal("ring full")
		}
		for _, c := range cs[:ac.Reap(cs, time.Second)] {
			e := inflight[c.UserData]
			delete(inflight, c.UserData)
			got := iov[e.BufOff : e.BufOff+uint64(e.Length)]
			if c.Status != 0 || c.Length != e.Length || c.CRC != chunkio.CRC(got) || !bytes.Equal(got, want[e.Offset:e.Offset+uint64(e.Length)]) {
				t.Fatalf("%s at %d through the agent: completion %+v, bytes equal %v", name, e.Offset, c, bytes.Equal(got, want[e.Offset:e.Offset+uint64(e.Length)]))
			}
			free = append(free, e.BufOff)
			done += int(e.Length)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s through the agent: %d of %d bytes in 60s", name, done, len(want))
		}
	}
}
