package shmring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Bell is an eventfd: one side rings it after queueing work, the other
// waits on it instead of spinning.
type Bell struct{ fd int }

// NewBell makes a bell.
func NewBell() (*Bell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("shmring: eventfd: %w", err)
	}
	return &Bell{fd: fd}, nil
}

// OpenBell wraps a received eventfd (it takes fd).
func OpenBell(fd int) *Bell { return &Bell{fd: fd} }

// Fd is the eventfd, to hand to another process.
func (b *Bell) Fd() int { return b.fd }

// Ring wakes the waiter.
func (b *Bell) Ring() {
	var one = [8]byte{1}
	unix.Write(b.fd, one[:])
}

// Wait blocks until the bell rings or timeoutMs passes.
func (b *Bell) Wait(timeoutMs int) {
	p := []unix.PollFd{{Fd: int32(b.fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(p, timeoutMs); n > 0 {
		var buf [8]byte
		unix.Read(b.fd, buf[:])
	}
}

// Close closes the eventfd.
func (b *Bell) Close() error { return unix.Close(b.fd) }
