// Package testproc runs parts of a test binary as child processes, for
// tests that need real processes: to SIGKILL, to restart, to share memory
// with across a process boundary. A package's TestMain hands a child its
// role before any test runs (Main); tests start children by role (Start)
// and read what they print, a line at a time. FreeAddr hands out loopback
// addresses for the servers such processes (or their parents) listen on.
package testproc

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The child's role and spec travel in its environment.
const (
	roleEnv = "SLUICE_TESTPROC_ROLE"
	specEnv = "SLUICE_TESTPROC_SPEC"
)

// Main is a test binary's TestMain. In a child it runs the child's role
// with its spec and exits: 0, or 2 after printing the role's error. In the
// parent it runs the tests.
func Main(m *testing.M, roles map[string]func(spec string) error) {
	role, ok := os.LookupEnv(roleEnv)
	if !ok {
		os.Exit(m.Run())
	}
	run := roles[role]
	if run == nil {
		fmt.Fprintf(os.Stderr, "testproc: no role %q in this test binary\n", role)
		os.Exit(2)
	}
	if err := run(os.Getenv(specEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(2)
	}
	os.Exit(0)
}

// Command is a child of this test binary that runs role with spec and no
// tests. extraEnv entries (KEY=VALUE) are added to its environment.
func Command(role, spec string, extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, specEnv+"="+spec)
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

// Proc is a running child.
type Proc struct {
	Cmd *exec.Cmd
	// Lines is the child's standard output a line at a time, closed when
	// it ends.
	Lines  <-chan string
	stderr Buffer
}

// Start starts cmd (from Command), killed and waited for when t ends.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd}
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1<<16)
	p.Lines = lines
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return p
}

// Expect waits up to wait for the child's next line and fails t unless it
// contains want; it returns the line.
func (p *Proc) Expect(t testing.TB, want string, wait time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.Lines:
		if !ok || !strings.Contains(l, want) {
			t.Fatalf("child %v: got %q (ended: %v), want %q; stderr: %s", p.Cmd.Args, l, !ok, want, p.Stderr())
		}
		return l
	case <-time.After(wait):
		t.Fatalf("child %v: no %q within %v; stderr: %s", p.Cmd.Args, want, wait, p.Stderr())
	}
	return ""
}

// Next is the child's next line, waiting for it; false once the child
// has ended.
func (p *Proc) Next() (string, bool) {
	l, ok := <-p.Lines
	return l, ok
}

// Skip is the first of the child's next lines that is not skip (a progress
// line, say), or "" once the child has ended.
func (p *Proc) Skip(skip string) string {
	for l := range p.Lines {
		if l != skip {
			return l
		}
	}
	return ""
}

// Stderr is what the child has written to its standard error so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Buffer collects what a child writes, from any number of goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr is a loopback TCP address nothing listens on now, for a server a
// test starts (in this process or a child) that must be told its address
// before it runs.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
