package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/internal/testproc"
)

// Proc is a process started in a host.
type Proc struct {
	Host *Host
	Cmd  *exec.Cmd // as started: `ip netns exec NS program args…`
	out  testproc.Buffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

// Start starts cmd (from exec.Command, not yet started) inside the host:
// its program runs under `ip netns exec`, which execs it in place, so
// signals reach it directly. Its standard output and error are kept
// (Output) and also go where cmd sends them. It is killed by Close, or by
// the kernel if the test process dies.
func (h *Host) Start(cmd *exec.Cmd) (*Proc, error) {
	if cmd.Err != nil {
		return nil, fmt.Errorf("hosts: start in %s: %w", h.Name, cmd.Err)
	}
	if cmd.Process != nil {
		return nil, fmt.Errorf("hosts: start in %s: %s already started", h.Name, cmd.Path)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("hosts: start in %s: %w", h.Name, err)
	}
	prog := cmd.Path
	cmd.Args = append([]string{ip, "netns", "exec", h.Name, prog}, cmd.Args[1:]...)
	cmd.Path = ip
	p := &Proc{Host: h, Cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = tee(&p.out, cmd.Stdout)
	cmd.Stderr = tee(&p.out, cmd.Stderr)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	n := h.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("hosts: start %s in %s: the net is closed", prog, h.Name)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("hosts: start %s in %s: %w", prog, h.Name, err)
	}
	n.procs = append(n.procs, p)
	go func() {
		p.err = cmd.Wait()
		n.log.Info("hosts: process ended", "host", h.Name, "prog", prog, "pid", cmd.Process.Pid, "err", p.err)
		close(p.done)
	}()
	n.log.Info("hosts: process started", "host", h.Name, "prog", prog, "pid", cmd.Process.Pid)
	return p, nil
}

func tee(buf *testproc.Buffer, w io.Writer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(buf, w)
}

// Output is what the process has written to its standard output and
// error so far.
func (p *Proc) Output() string { return p.out.String() }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns what exec.Cmd.Wait did.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Signal sends sig to a running process; one that has ended is left be.
func (p *Proc) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("hosts: signal %v to %d in %s: %w", sig, p.Cmd.Process.Pid, p.Host.Name, err)
	}
	return nil
}

// Kill sends SIGKILL.
func (p *Proc) Kill() error { return p.Signal(syscall.SIGKILL) }

// Pause stops the process (SIGSTOP) until Resume.
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// Stop asks the process to end (SIGTERM), kills it if it has not within
// grace, and waits for it.
func (p *Proc) Stop(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		if err := p.Kill(); err != nil {
			return err
		}
		<-p.done
	}
	return nil
}

// Expect waits until the process's output contains want, and fails if
// the process ends first or ctx is done.
func (p *Proc) Expect(ctx context.Context, want string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.Output(), want) {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(p.Output(), want) {
				return nil
			}
			return fmt.Errorf("hosts: %s in %s ended (%v) before printing %q; output:\n%s", p.Cmd.Args[4], p.Host.Name, p.err, want, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("hosts: %s in %s printed no %q: %w; output:\n%s", p.Cmd.Args[4], p.Host.Name, want, ctx.Err(), p.Output())
		case <-tick.C:
		}
	}
}
