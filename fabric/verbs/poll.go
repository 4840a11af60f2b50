//go:build verbs

package verbs

import (
	"runtime"
)

// completion is one work completion as the poller hands it over.
type completion struct {
	wrID    uint64
	status  wcStatus
	byteLen uint32
	qpNum   uint32
	recv    bool // a receive (SRQ) completion rather than a send-queue one
}

// pollLoop drains the completion queue: send-queue completions go to their
// waiters, receives to the message handler. It sleeps on the completion
// channel when there is nothing to do.
func (ep *Endpoint) pollLoop() {
	defer ep.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var pb pollBuf
	out := make([]completion, 0, pollBatch)
	for ep.ctx.Err() == nil {
		out = ep.dev.poll(&pb, out[:0])
		if len(out) == 0 {
			// Arm, then look again: a completion that arrived before the
			// arming raises no event.
			err := ep.dev.arm()
			if err == nil {
				if out = ep.dev.poll(&pb, out[:0]); len(out) == 0 {
					err = ep.dev.block(100)
				}
			}
			if err != nil {
				ep.log.Error("fabric/verbs poller stopped", "err", err)
				ep.comps.close(err)
				return
			}
		}
		for _, wc := range out {
			if wc.recv {
				ep.onRecv(wc)
			} else if !ep.comps.complete(wc.wrID, wc.status) && wc.status != wcSuccess {
				ep.log.Debug("fabric/verbs completion without a waiter", "wr", wc.wrID, "status", wc.status)
			}
		}
	}
}

func (ep *Endpoint) recvSlot(i int) []byte {
	return ep.recv.buf[i*ep.cfg.MsgSize : (i+1)*ep.cfg.MsgSize]
}

func (ep *Endpoint) repost(i int) error {
	return ep.dev.postRecv(uint64(i), ep.recvSlot(i), ep.recv.lkey())
}

// onRecv takes a received message out of its buffer, gives the buffer back
// to the shared receive queue and handles the message.
func (ep *Endpoint) onRecv(wc completion) {
	slot := int(wc.wrID)
	ep.mu.Lock()
	c := ep.byQPN[wc.qpNum]
	ep.mu.Unlock()
	var msg []byte
	if wc.status == wcSuccess && c != nil {
		msg = append([]byte(nil), ep.recvSlot(slot)[:wc.byteLen]...)
	}
	if err := ep.repost(slot); err != nil {
		ep.log.Error("fabric/verbs receive buffer lost", "err", err)
	}
	if msg == nil {
		return
	}
	if c.ret.consumed() && c.crediting.CompareAndSwap(false, true) {
		ep.spawn(func() {
			defer c.crediting.Store(false)
			c.sendCredits(ep.ctx)
		})
	}
	h, body, err := parseMsg(msg)
	if err != nil {
		c.fail(err)
		return
	}
	c.grant(int(h.credits))
	switch h.typ {
	case msgReply:
		c.deliver(h, body)
	case msgCall:
		ep.spawn(func() { c.serveCall(h, body) })
	}
}
