package fuse

import (
	"container/list"
	"context"
	"sync"

	"github.com/sluicefs/sluice/sdk"
)

// blockCache keeps the blocks random readers come back to, for the files
// open in this mount: the mount's own page cache, which also serves
// O_DIRECT readers (the kernel's does not). Blocks are aligned pieces of
// cacheBlock bytes of a file, held in one registered region cut into
// slots (mapped at the first admission, so a mount nobody reads at random
// costs nothing), evicted least recently used first.
//
// A block is admitted on its second miss: the first read of a block goes
// straight to the file (as without a cache) and leaves a ghost; a read
// that finds the ghost reads its own bytes straight from the file too, and
// starts a fetch of the whole block (one batched read, in the background,
// at most maxFetches at a time), and the reads after the fetch copy out of
// memory. So no read waits for more than its own bytes, and a reader that
// never comes back, e.g. one random pass over a file larger than the
// cache, reads no more from storage than without one.
//
// What it holds is never older than the latest open: blocks belong to one
// opening of a file in this mount (its readahead), go with it at the last
// close and are forgotten at every open of the file, so an open reads
// what other clients wrote before it from storage (close-to-open; the
// kernel's page cache for this mount is kept at an open only when the file
// is unchanged since the previous one, pages.go).
// Writes, truncation and allocation through the mount make the file's
// blocks stale (its readahead's generation), and a fetch that raced with
// one is never served to a reader that came after.
type blockCache struct {
	c     *sdk.Client
	stats *Stats
	slots int // blocks it holds at most

	mu       sync.Mutex
	region   *sdk.Buffer // slots*cacheBlock bytes, nil until the first admission
	unmapped bool        // the region could not be had: the cache is off
	free     []int       // slots not in use
	blocks   map[blockKey]*cached
	lru      list.List // of *cached, most recently used first
	ghosts   map[blockKey]struct{}
	ring     []blockKey     // ghosts in the order they came, to forget the oldest
	next     int            // ring's oldest
	files    map[uint64]int // blocks held for each file
	fetching int            // fetches under way
	fetches  sync.WaitGroup // the same, for close
}

// cacheBlock is the unit the cache fetches and keeps.
const cacheBlock = 256 << 10

// ghostsPerSlot: how many first misses the cache remembers, for each block
// it can hold.
const ghostsPerSlot = 4

// maxFetches bounds the blocks being fetched at once.
const maxFetches = 4

type blockKey struct {
	file uint64 // the readahead's id: one opening of the file
	idx  int64  // which block of the file
}

type cached struct {
	key   blockKey
	gen   uint64 // the file's generation when the fetch began
	slot  int    // where in the region it lives
	n     int    // bytes of the file in it
	ready bool   // fetched
	pins  int    // replies pointing into it, or its fetch
	gone  bool   // forgotten while pinned: the last unpin frees its slot
	elem  *list.Element
}

// newBlockCache holds up to limit bytes; nil for less than one block.
func newBlockCache(c *sdk.Client, limit int64, stats *Stats) *blockCache {
	slots := int(limit / cacheBlock)
	if slots < 1 {
		return nil
	}
	return &blockCache{c: c, stats: stats, slots: slots, blocks: map[blockKey]*cached{},
		ghosts: map[blockKey]struct{}{}, ring: make([]blockKey, 0, slots*ghostsPerSlot), files: map[uint64]int{}}
}

// read answers r's read of p at off from the file ra reads, size long,
// through the cache; gen is the file's generation the read was made in.
func (bc *blockCache) read(ra *readahead, r *reply, p []byte, off, size int64, gen uint64) error {
	end := off + int64(len(p))
	for pos := off; pos < end; {
		idx := pos / cacheBlock
		stop := min(end, (idx+1)*cacheBlock)
		if err := bc.readBlock(ra, r, p[pos-off:stop-off], pos, size, blockKey{ra.id, idx}, gen); err != nil {
			return err
		}
		pos = stop
	}
	return nil
}

// readBlock answers r's read of p at off, all inside block key: a view of
// the block, pinned by r, or p read from the file.
func (bc *blockCache) readBlock(ra *readahead, r *reply, p []byte, off, size int64, key blockKey, gen uint64) error {
	b, fetch := bc.take(key, gen, size)
	if fetch {
		bc.stats.CacheFetches.Add(1)
		bc.fetch(ra, b)
		return r.direct(p, off)
	}
	if b == nil {
		return r.direct(p, off)
	}
	from := off - key.idx*cacheBlock
	if from+int64(len(p)) > int64(b.n) {
		bc.unpin(b)
		return r.direct(p, off) // the file grew past the block's bytes
	}
	at := b.slot*cacheBlock + int(from)
	r.add(bc.region.B[at : at+len(p)])
	r.blocks = append(r.blocks, b)
	bc.stats.CacheHits.Add(1)
	return nil
}

// fetch reads block b, admitted and pinned for it, in the background.
func (bc *blockCache) fetch(ra *readahead, b *cached) {
	ra.background(func(ctx context.Context) {
		err := bc.c.ReadBatch(ctx, []sdk.ReadOp{{File: ra.f, Off: b.key.idx * cacheBlock, N: b.n, Buf: bc.region, BufOff: b.slot * cacheBlock}})
		bc.mu.Lock()
		bc.fetching--
		if err != nil {
			bc.forget(b) // later misses read directly, and may fetch it again
		} else {
			b.ready = true
		}
		bc.mu.Unlock()
		bc.unpin(b)
		bc.fetches.Done()
	})
}

// take finds block key of generation gen fetched, and pins it; or admits
// it, pinned for its fetch (fetch: the caller starts it); nil when the
// read should go to the file.
func (bc *blockCache) take(key blockKey, gen uint64, size int64) (b *cached, fetch bool) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if b := bc.blocks[key]; b != nil {
		if b.gen == gen && b.ready {
			b.pins++
			bc.lru.MoveToFront(b.elem)
			return b, false
		}
		if b.gen == gen || b.pins > 0 {
			return nil, false // being fetched, or stale but still being read
		}
		bc.forget(b)
	} else if _, ok := bc.ghosts[key]; !ok {
		bc.remember(key)
		return nil, false
	}
	if bc.fetching == maxFetches {
		return nil, false // the ghost stays: a later miss fetches it
	}
	slot, ok := bc.slot()
	if !ok {
		return nil, false
	}
	delete(bc.ghosts, key)
	bc.fetching++
	bc.fetches.Add(1) // reads never overlap close
	b = &cached{key: key, gen: gen, slot: slot, n: int(min(cacheBlock, size-key.idx*cacheBlock)), pins: 1}
	b.elem = bc.lru.PushFront(b)
	bc.blocks[key] = b
	bc.files[key.file]++
	return b, true
}

// slot returns a free slot, evicting the least recently used block no
// reader holds; false when every block is held.
func (bc *blockCache) slot() (int, bool) {
	if bc.region == nil {
		if bc.unmapped {
			return 0, false
		}
		region, err := bc.c.NewBuffer(bc.slots * cacheBlock)
		if err != nil {
			bc.unmapped = true // no memory for it: reads go to the file
			return 0, false
		}
		bc.region = region
		for i := bc.slots - 1; i >= 0; i-- {
			bc.free = append(bc.free, i)
		}
	}
	for e := bc.lru.Back(); len(bc.free) == 0 && e != nil; e = e.Prev() {
		if b := e.Value.(*cached); b.pins == 0 {
			bc.forget(b) // frees its slot
		}
	}
	n := len(bc.free)
	if n == 0 {
		return 0, false
	}
	s := bc.free[n-1]
	bc.free = bc.free[:n-1]
	return s, true
}

// forget drops block b and frees its slot, or has the last unpin free it
// (bc.mu held).
func (bc *blockCache) forget(b *cached) {
	if bc.blocks[b.key] != b {
		return
	}
	delete(bc.blocks, b.key)
	bc.lru.Remove(b.elem)
	if bc.files[b.key.file]--; bc.files[b.key.file] == 0 {
		delete(bc.files, b.key.file)
	}
	if b.pins == 0 {
		bc.free = append(bc.free, b.slot)
	} else {
		b.gone = true
	}
}

func (bc *blockCache) unpin(b *cached) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if b.pins--; b.pins == 0 && b.gone {
		bc.free = append(bc.free, b.slot)
	}
}

// remember records a first miss, forgetting the oldest beyond the bound.
func (bc *blockCache) remember(key blockKey) {
	if len(bc.ring) < cap(bc.ring) {
		bc.ring = append(bc.ring, key)
	} else {
		delete(bc.ghosts, bc.ring[bc.next])
		bc.ring[bc.next] = key
		bc.next = (bc.next + 1) % len(bc.ring)
	}
	bc.ghosts[key] = struct{}{}
}

// drop forgets the blocks of file (an opening that ended).
func (bc *blockCache) drop(file uint64) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.files[file] == 0 {
		return
	}
	for key, b := range bc.blocks {
		if key.file == file {
			bc.forget(b)
		}
	}
}

// close releases the region, once the mount serves no more reads and the
// fetches they started are over.
func (bc *blockCache) close() {
	if bc == nil {
		return
	}
	bc.fetches.Wait()
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.region != nil {
		bc.region.Release()
		bc.region = nil
	}
	bc.blocks, bc.free = map[blockKey]*cached{}, nil
	bc.lru.Init()
}

// held is how many bytes of blocks the cache holds, fetched or being
// fetched.
func (bc *blockCache) held() int64 {
	if bc == nil {
		return 0
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return int64(len(bc.blocks)) * cacheBlock
}

// limit is the most it holds.
func (bc *blockCache) limit() int64 {
	if bc == nil {
		return 0
	}
	return int64(bc.slots) * cacheBlock
}
