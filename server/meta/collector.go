package meta

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
)

// ChunkRemover deletes a file's chunks from storage (every replica of every
// chain its layout names); the storage client implements it.
type ChunkRemover interface {
	RemoveChunks(ctx context.Context, file *metapb.Inode) error
}

// Collector runs on the leader and removes the chunks of files whose last
// link went at least Delay ago and that no write session holds open, then
// forgets them through the log.
type Collector struct {
	r       *Replica
	remover ChunkRemover
	delay   time.Duration
	log     *slog.Logger
}

// NewCollector makes a collector over r.
func NewCollector(r *Replica, remover ChunkRemover, delay time.Duration, log *slog.Logger) *Collector {
	if log == nil {
		log = slog.Default()
	}
	return &Collector{r: r, remover: remover, delay: delay, log: log}
}

// Run collects every interval until ctx ends.
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.r.IsLeader() {
			if _, err := c.Collect(ctx, time.Now()); err != nil {
				c.log.Warn("chunk collection failed", "err", err)
			}
		}
	}
}

// Collect does one round as of now and returns how many files it collected.
func (c *Collector) Collect(ctx context.Context, now time.Time) (int, error) {
	files, err := c.r.Namespace().Garbage(256)
	if err != nil {
		return 0, err
	}
	done := 0
	for _, f := range files {
		if now.Sub(time.Unix(0, f.CtimeNs)) < c.delay {
			continue
		}
		if open, err := c.r.Namespace().HasSessions(f.Ino); err != nil || open {
			continue
		}
		if err := c.remover.RemoveChunks(ctx, f); err != nil {
			return done, fmt.Errorf("remove chunks of inode %d: %w", f.Ino, err)
		}
		res, err := c.r.Do(ctx, &metapb.Command{Op: &metapb.Command_Collected{Collected: f.Ino}})
		if err != nil {
			return done, err
		}
		if res.Code != 0 {
			return done, fmt.Errorf("forget inode %d: %s", f.Ino, res.Error)
		}
		done++
	}
	return done, nil
}
