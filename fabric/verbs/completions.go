package verbs

import (
	"fmt"
	"sync"

	"github.com/sluicefs/sluice/fabric"
)

// wcStatus mirrors enum ibv_wc_status (the cgo build checks that the values
// agree with the header).
type wcStatus int

const (
	wcSuccess wcStatus = iota
	wcLocLenErr
	wcLocQPOpErr
	wcLocEECOpErr
	wcLocProtErr
	wcWRFlushErr
	wcMWBindErr
	wcBadRespErr
	wcLocAccessErr
	wcRemInvReqErr
	wcRemAccessErr
	wcRemOpErr
	wcRetryExcErr
	wcRNRRetryExcErr
	wcLocRDDViolErr
	wcRemInvRDReqErr
	wcRemAbortErr
	wcInvEECNErr
	wcInvEECStateErr
	wcFatalErr
	wcRespTimeoutErr
	wcGeneralErr
)

// errRemoteAccess marks a completion the NIC refused for key, bounds or
// rights; the transport asks the peer which (see diagnose).
var errRemoteAccess = fmt.Errorf("%w: remote access error", fabric.ErrAccessDenied)

// statusError maps a work completion's status to the fabric error a caller
// sees, the same as fabric/tcp returns for the same condition.
func statusError(s wcStatus) error {
	switch s {
	case wcSuccess:
		return nil
	case wcRemAccessErr:
		return errRemoteAccess
	case wcRemInvReqErr, wcRemInvRDReqErr:
		return fmt.Errorf("%w: peer's NIC refused the request (status %d)", fabric.ErrBadRequest, s)
	case wcLocLenErr:
		return fmt.Errorf("%w: local length error (status %d)", fabric.ErrLengthMismatch, s)
	case wcLocProtErr, wcLocAccessErr:
		return fmt.Errorf("%w: local buffer not registered for this access (status %d)", fabric.ErrAccessDenied, s)
	case wcWRFlushErr:
		return fmt.Errorf("%w: queue pair in error state, request flushed", fabric.ErrPeerClosed)
	case wcRetryExcErr, wcRNRRetryExcErr, wcRespTimeoutErr:
		return fmt.Errorf("%w: transport retries exhausted (status %d)", fabric.ErrPeerClosed, s)
	}
	return fmt.Errorf("%w: work completion status %d", fabric.ErrPeerClosed, s)
}

// waiter is an operation waiting for its completion.
type waiter struct {
	done chan error // buffered, 1
}

// completions routes send-queue completions to the operations waiting for
// them, by work-request id. Ids are handed out here and never reused while
// in flight. Receive completions go elsewhere (the poller hands them to the
// message handler by buffer index).
type completions struct {
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*waiter
	closed  error
}

func newCompletions() *completions {
	return &completions{waiting: make(map[uint64]*waiter)}
}

// expect registers an operation and returns its work-request id.
func (c *completions) expect() (uint64, *waiter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed != nil {
		return 0, nil, c.closed
	}
	c.next++
	w := &waiter{done: make(chan error, 1)}
	c.waiting[c.next] = w
	return c.next, w, nil
}

// forget drops an id whose work request was never posted.
func (c *completions) forget(id uint64) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// complete delivers the completion of work request id with status s; it
// reports false for an id nobody waits for (a bug, or an unsignaled
// request's error surfacing).
func (c *completions) complete(id uint64, s wcStatus) bool {
	c.mu.Lock()
	w := c.waiting[id]
	delete(c.waiting, id)
	c.mu.Unlock()
	if w == nil {
		return false
	}
	w.done <- statusError(s)
	return true
}

// close fails every waiting operation with err, and later ones too.
func (c *completions) close(err error) {
	c.mu.Lock()
	waiting := c.waiting
	c.waiting = make(map[uint64]*waiter)
	if c.closed == nil {
		c.closed = err
	}
	c.mu.Unlock()
	for _, w := range waiting {
		w.done <- err
	}
}

// pending reports how many operations wait.
func (c *completions) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}
