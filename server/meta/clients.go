package meta

import (
	"sync"
	"time"
)

// liveClients is when the leader last heard a client renew (KeepOpen).
// Like read leases and locks it is the leader's memory, never the log. A
// client with files open for writing renews too, so one not heard from
// for a lease, whose sessions are all older than that, is taken for dead:
// the collector ends its write sessions (PruneClient), and a file a
// crashed writer held is collected once unlinked (Collector.EndDeadWriters).
type liveClients struct {
	mu    sync.Mutex
	seen  map[uint64]time.Time
	swept time.Time
}

// clientMemory is how long a client's last renewal is remembered: longer
// than any lease, so that the map holds only clients alive lately.
const clientMemory = 10 * time.Minute

func (l *liveClients) heard(client uint64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[uint64]time.Time{}
	}
	l.seen[client] = now
	if now.Sub(l.swept) > clientMemory {
		l.swept = now
		for c, t := range l.seen {
			if now.Sub(t) > clientMemory {
				delete(l.seen, c)
			}
		}
	}
}

// lastHeard is when client last renewed with this leader (zero: not
// lately).
func (l *liveClients) lastHeard(client uint64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[client]
}
