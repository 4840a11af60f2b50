package verbs

import (
	"errors"
	"testing"

	"github.com/sluicefs/sluice/fabric"
)

func TestCompletionsDemultiplex(t *testing.T) {
	c := newCompletions()
	const n = 100
	ids := make([]uint64, n)
	ws := make([]*waiter, n)
	for i := range ids {
		id, w, err := c.expect()
		if err != nil {
			t.Fatal(err)
		}
		ids[i], ws[i] = id, w
	}
	// Complete in reverse with a status per op; each waiter gets its own.
	for i := n - 1; i >= 0; i-- {
		st := wcSuccess
		if i%10 == 3 {
			st = wcRemAccessErr
		}
		if !c.complete(ids[i], st) {
			t.Fatalf("completion %d had no waiter", i)
		}
	}
	for i, w := range ws {
		err := <-w.done
		if i%10 == 3 {
			if !errors.Is(err, fabric.ErrAccessDenied) {
				t.Fatalf("op %d: %v, want ErrAccessDenied", i, err)
			}
		} else if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if c.complete(ids[0], wcSuccess) {
		t.Fatal("a completion was delivered twice")
	}
	if c.pending() != 0 {
		t.Fatalf("%d waiters left", c.pending())
	}
}

func TestCompletionsClose(t *testing.T) {
	c := newCompletions()
	_, w1, _ := c.expect()
	id2, _, _ := c.expect()
	c.forget(id2)
	c.close(fabric.ErrPeerClosed)
	if err := <-w1.done; !errors.Is(err, fabric.ErrPeerClosed) {
		t.Fatalf("waiter after close: %v", err)
	}
	if _, _, err := c.expect(); !errors.Is(err, fabric.ErrPeerClosed) {
		t.Fatalf("expect after close: %v", err)
	}
}

func TestStatusErrors(t *testing.T) {
	cases := map[wcStatus]error{
		wcSuccess:        nil,
		wcRemAccessErr:   fabric.ErrAccessDenied,
		wcRemInvReqErr:   fabric.ErrBadRequest,
		wcLocLenErr:      fabric.ErrLengthMismatch,
		wcLocProtErr:     fabric.ErrAccessDenied,
		wcWRFlushErr:     fabric.ErrPeerClosed,
		wcRetryExcErr:    fabric.ErrPeerClosed,
		wcRNRRetryExcErr: fabric.ErrPeerClosed,
		wcFatalErr:       fabric.ErrPeerClosed,
	}
	for st, want := range cases {
		err := statusError(st)
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("status %d: %v, want %v", st, err, want)
		}
	}
}
