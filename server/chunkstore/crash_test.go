package chunkstore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
)

// The crash test runs a writer in a child process (this test binary, with
// crashChildEnv set) and kills it with SIGKILL at random moments.
// TestMain runs this binary's child processes: the crash test's writer.
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"crash-writer": crashChild})
}

var crashChunk = chunkio.ID{Inode: 42, Index: 7}

const crashChunkSize = 200 << 10

// crashStep is update v of the crash test's deterministic history: every
// fifth a full rewrite, the others 8 KiB patches at varying offsets, so that
// a mixture of two versions would be visible.
func crashStep(v uint64) (off uint32, data []byte, full bool) {
	if v%5 == 1 {
		return 0, fabrictest.RandBytes(v, crashChunkSize), true
	}
	return uint32(v*7919) % (crashChunkSize - 8<<10), fabrictest.RandBytes(v, 8<<10), false
}

// crashContent is the chunk's content after updates 1..v.
func crashContent(v uint64) []byte {
	var c []byte
	for i := uint64(1); i <= v; i++ {
		off, data, full := crashStep(i)
		if full {
			c = append(c[:0], data...)
			continue
		}
		copy(c[off:], data)
	}
	return c
}

// crashChild writes and commits updates forever, printing each version once
// it is committed. Its spec is "MODE|DIR": the target directory, and how
// it stores and commits each update: "tail" at once, as a chain's tail
// does (PrepareCommit); "chain" as a chain's other nodes do (the data
// finished while successors store, then committed); otherwise with Prepare
// and Commit.
func crashChild(spec string) error {
	mode, dir, _ := strings.Cut(spec, "|")
	e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir})
	if err != nil {
		return err
	}
	m, err := e.Meta(crashChunk)
	if err != nil {
		return err
	}
	for v := m.GetCommitted().GetVer() + 1; ; v++ {
		off, data, full := crashStep(v)
		switch mode {
		case "tail":
			if _, err := e.PrepareCommit(crashChunk, v, off, data, full, 1); err != nil {
				return err
			}
			fmt.Println(v)
			continue
		case "chain":
			_, finish, err := e.Store(chunkstore.StoreRequest{ID: crashChunk, Ver: v, Off: off, Data: data, Full: full, ChainVer: 1, DeferSync: true})
			if err != nil {
				return err
			}
			if err := finish(); err != nil {
				return err
			}
			if _, err := e.Commit(crashChunk, v); err != nil {
				return err
			}
			fmt.Println(v)
			continue
		}
		if _, err := e.Prepare(crashChunk, v, off, data, full, 1); err != nil {
			return err
		}
		if _, err := e.Commit(crashChunk, v); err != nil {
			return err
		}
		fmt.Println(v)
	}
}

// TestCrashConsistency: 50 SIGKILLs of a writing process; after each, the
// chunk reads back as its last acknowledged version or the next one, never
// a mixture and never a checksum failure.
func TestCrashConsistency(t *testing.T) {
	for _, mode := range []string{"prepare+commit", "tail", "chain"} {
		t.Run(mode, func(t *testing.T) { testCrashConsistency(t, mode) })
	}
}

func testCrashConsistency(t *testing.T, mode string) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	last := uint64(0)
	for round := 0; round < 50; round++ {
		p := testproc.Start(t, testproc.Command("crash-writer", mode+"|"+dir))
		cmd := p.Cmd
		acked := make(chan uint64, 1<<16)
		go func() {
			for l := range p.Lines {
				if v, err := strconv.ParseUint(l, 10, 64); err == nil {
					acked <- v
				}
			}
			close(acked)
		}()
		// Let it get going, then kill it at a random moment.
		select {
		case v, ok := <-acked:
			if !ok {
				cmd.Wait()
				t.Fatalf("round %d: child exited: %s", round, p.Stderr())
			}
			last = v
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: child wrote nothing: %s", round, p.Stderr())
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		cmd.Process.Kill()
		// Drain before Wait: Wait closes the stdout pipe, and the lines
		// still in it (acknowledged versions) would be lost with it.
		for v := range acked {
			last = v
		}
		cmd.Wait()

		e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		buf := make([]byte, crashChunkSize)
		n, ver, err := e.Read(crashChunk, 0, buf)
		e.Close()
		if err != nil {
			t.Fatalf("round %d: read after kill: %v", round, err)
		}
		if ver.Ver != last && ver.Ver != last+1 {
			t.Fatalf("round %d: committed version %d, last acknowledged %d", round, ver.Ver, last)
		}
		if !bytes.Equal(buf[:n], crashContent(ver.Ver)) {
			t.Fatalf("round %d: version %d does not read back as written", round, ver.Ver)
		}
		last = ver.Ver
	}
	t.Logf("50 kills survived; %d versions committed", last)
}
