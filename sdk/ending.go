package sdk

import (
	"context"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Ending write sessions in batches. The last close of a handle that has
// published everything it wrote (a sync, or the mount's flush, did) has
// nothing left to tell the metadata service but that the session is over:
// rather than a command of its own, that rides on the next close this
// client sends (CloseRequest.ended, applied before that close), or on one
// sent for it after endDelay. Until then the session stays open, which
// only keeps the file from the collector and from another writer's inline
// hand-over for that long; a client that dies meanwhile has its sessions
// ended by the leader, as always.

// endDelay is how long a session's end waits for a close to ride on.
const endDelay = 50 * time.Millisecond

// endLater queues the end of f's session.
func (c *Client) endLater(f *File) {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	c.ends = append(c.ends, &metapb.SessionRef{Ino: f.in.Ino, Session: f.session})
	c.scheduleEnds()
}

// scheduleEnds arms the timer that sends queued ends (endMu held).
func (c *Client) scheduleEnds() {
	if c.endTimer != nil || len(c.ends) == 0 || c.closing.Err() != nil {
		return
	}
	c.wg.Add(1)
	c.endTimer = time.AfterFunc(endDelay, func() {
		defer c.wg.Done()
		c.endMu.Lock()
		c.endTimer = nil
		c.endMu.Unlock()
		c.sendEnds()
	})
}

// takeEnds takes up to fsmeta.MaxEnded queued ends, for a close to carry.
func (c *Client) takeEnds() []*metapb.SessionRef {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	n := min(len(c.ends), fsmeta.MaxEnded)
	ends := c.ends[:n:n]
	c.ends = c.ends[n:]
	return ends
}

// endAgain puts back ends a close failed to carry (ending a session twice
// is harmless) and arms the timer for them.
func (c *Client) endAgain(ends []*metapb.SessionRef) {
	if len(ends) == 0 {
		return
	}
	c.endMu.Lock()
	defer c.endMu.Unlock()
	c.ends = append(ends, c.ends...)
	c.scheduleEnds()
}

// sendEnds sends the queued ends in closes of their own; what fails is
// queued again, unless the client is closing.
func (c *Client) sendEnds() {
	for {
		ends := c.takeEnds()
		if len(ends) == 0 {
			return
		}
		ctx, done := c.call(context.Background())
		_, err := c.meta.Close(ctx, &metapb.CloseRequest{Ino: ends[0].Ino, Session: ends[0].Session, Ended: ends[1:],
			Client: c.id, Seq: c.next()})
		closing := context.Cause(ctx) == ErrClosed
		done()
		if err != nil {
			if !closing {
				c.log.Warn("ending write sessions failed; trying again", "sessions", len(ends), "err", err)
				c.endAgain(ends)
			}
			return
		}
	}
}

// flushEnds sends what is queued now and stops the timer (Close).
func (c *Client) flushEnds() {
	c.endMu.Lock()
	if t := c.endTimer; t != nil && t.Stop() {
		c.endTimer = nil
		c.wg.Done()
	}
	c.endMu.Unlock()
	c.sendEnds()
}
