package storage

import (
	"sync"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/proto/storagepb"
)

// lockKey names one target's copy of a chunk.
type lockKey struct {
	target routing.TargetID
	chunk  chunkio.ID
}

// keyedMutex serializes work per key with no false sharing between keys
// (two targets of one chain may share a node).
type keyedMutex struct {
	mu    sync.Mutex
	locks map[lockKey]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key lockKey) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[lockKey]*keyedEntry)
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// dedupeKey is a client's update: its id and sequence number.
type dedupeKey struct{ client, seq uint64 }

// dedupe remembers the outcome of recent client updates so that a retry is
// answered, not applied twice; a retry that arrives while the first attempt
// runs waits for it. Failed attempts are forgotten so they can be retried.
type dedupe struct {
	mu    sync.Mutex
	max   int
	order []dedupeKey
	done  map[dedupeKey]*dedupeEntry
}

type dedupeEntry struct {
	ready chan struct{}
	reply *storagepb.UpdateReply
	err   error
}

func newDedupe(max int) *dedupe { return &dedupe{max: max, done: make(map[dedupeKey]*dedupeEntry)} }

func (d *dedupe) do(k dedupeKey, fn func() (*storagepb.UpdateReply, error)) (*storagepb.UpdateReply, error) {
	d.mu.Lock()
	if e := d.done[k]; e != nil {
		d.mu.Unlock()
		<-e.ready
		if e.err == nil {
			return e.reply, nil
		}
		return d.do(k, fn)
	}
	e := &dedupeEntry{ready: make(chan struct{})}
	d.done[k] = e
	d.order = append(d.order, k)
	for len(d.order) > d.max {
		delete(d.done, d.order[0])
		d.order = d.order[1:]
	}
	d.mu.Unlock()
	e.reply, e.err = fn()
	if e.err != nil {
		d.mu.Lock()
		if d.done[k] == e {
			delete(d.done, k)
		}
		d.mu.Unlock()
	}
	close(e.ready)
	return e.reply, e.err
}
