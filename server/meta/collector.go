package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// ChunkRemover deletes a file's chunks from storage (every replica of every
// chain its layout names); the storage client implements it.
type ChunkRemover interface {
	RemoveChunks(ctx context.Context, file *metapb.Inode) error
}

// Collector runs on the leader and removes the chunks of files whose last
// link went at least Delay ago and that no write session or read lease
// holds open, then forgets them through the log.
type Collector struct {
	r       *Replica
	remover ChunkRemover
	delay   time.Duration
	log     *slog.Logger
	// leaderSince is when this replica last became leader (Run): for a
	// lease's length after that it collects nothing, since read leases
	// renewed with the old leader are not known here yet.
	leaderSince time.Time
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
	tick.Every(ctx, interval, func() {
		if !c.r.IsLeader() {
			c.leaderSince = time.Time{}
			return
		}
		if c.leaderSince.IsZero() {
			c.leaderSince = time.Now()
		}
		if time.Since(c.leaderSince) < fsmeta.ReadLease {
			return
		}
		if _, err := c.Collect(ctx, time.Now()); err != nil {
			c.log.Warn("chunk collection failed", "err", err)
		}
	})
}

// Collect does one round over the whole queue as of now and returns how
// many files it collected. A file it cannot collect yet (too recent, open,
// storage failing) is skipped, not allowed to hold up the rest; the first
// failure is returned after the round.
func (c *Collector) Collect(ctx context.Context, now time.Time) (int, error) {
	done := 0
	var first error
	after := uint64(0)
	for {
		files, err := c.r.Namespace().GarbageAfter(after, 256)
		if err != nil || len(files) == 0 {
			return done, errors.Join(first, err)
		}
		for _, f := range files {
			after = f.Ino
			if now.Sub(time.Unix(0, f.CtimeNs)) < c.delay {
				continue
			}
			if open, err := c.r.Namespace().HasSessions(f.Ino); err != nil || open || c.r.readers.held(f.Ino, now) {
				continue
			}
			err := c.remover.RemoveChunks(ctx, f)
			if err == nil {
				var res *metapb.Result
				if res, err = c.r.Do(ctx, &metapb.Command{Op: &metapb.Command_Collected{Collected: f.Ino}}); err == nil && res.Code != 0 {
					err = fmt.Errorf("forget inode %d: %s", f.Ino, res.Error)
				}
			}
			if err != nil {
				c.log.Warn("cannot collect a file yet", "inode", f.Ino, "err", err)
				if first == nil {
					first = fmt.Errorf("collect inode %d: %w", f.Ino, err)
				}
				continue
			}
			done++
		}
	}
}

// StorageRemover removes a file's chunks from storage: chunk i of a file
// of n bytes (i < n / chunk size, rounded up) lives on ChunkChain of the
// file's chain table, per the cluster map.
type StorageRemover struct {
	Client *chunkio.Client
	Map    func() (*mgmtdpb.ClusterMap, error)
}

// RemoveChunks removes every chunk of f.
func (s StorageRemover) RemoveChunks(ctx context.Context, f *metapb.Inode) error {
	l := f.GetLayout()
	if l.GetChunkSize() == 0 || f.Size == 0 {
		return nil
	}
	m, err := s.Map()
	if err != nil {
		return err
	}
	var chains []uint32
	for _, t := range m.Tables {
		if t.Id == l.ChainTable {
			chains = t.Chains
		}
	}
	if len(chains) == 0 {
		return fmt.Errorf("inode %d: no chain table %d", f.Ino, l.ChainTable)
	}
	n := (f.Size + uint64(l.ChunkSize) - 1) / uint64(l.ChunkSize)
	for i := uint64(0); i < n; i++ {
		chain := fsmeta.ChunkChain(chains, l, f.Ino, i)
		if err := s.Client.Remove(ctx, routing.ChainID(chain), chunkio.ID{Inode: f.Ino, Index: uint32(i)}); err != nil {
			return err
		}
	}
	return nil
}
