package chunkstore

import (
	"sync"
	"sync/atomic"

	"github.com/sluicefs/sluice/chunkio"
)

// fileCache keeps chunk files open for reads: a chunk's two files are
// written in place and never replaced, so an open descriptor (and a
// mapping of the file) stays right for as long as the chunk exists (Remove
// evicts). It saves an open and a close per read, which is most of a small
// read's cost. Closing a file unmaps it. Beyond max files, one not read
// since the last sweep passed it is closed (CLOCK's second chance): a hit
// sets a flag in the entry it already touches, where moving the entry to
// the front of a list touched two more, each a cache miss when shuffled
// reads spread over many chunks.
type fileCache struct {
	mu    sync.Mutex
	max   int
	files map[fileKey]*cachedFile
}

type fileKey struct {
	id   chunkio.ID
	slot uint32
}

type cachedFile struct {
	key     fileKey
	f       File
	refs    int
	evicted bool
	used    bool // read since the sweep last passed it

	mapOnce sync.Once
	mapped  []byte // the file's mapping (see view), nil if none
	mapErr  error
	// size is the file's size as last seen, or -1: reset by every write to
	// the file (under its slot's lock), so a reader need not ask the
	// kernel again for each small read.
	size atomic.Int64
}

// fileSize returns the file's size, from the kernel only when a write may
// have changed it since the last time.
func (cf *cachedFile) fileSize() (int64, error) {
	if n := cf.size.Load(); n >= 0 {
		return n, nil
	}
	n, err := cf.f.(Viewer).Size()
	if err != nil {
		return 0, err
	}
	cf.size.CompareAndSwap(-1, n)
	return n, nil
}

// view returns the file mapped over its first n bytes, mapped on first use
// and kept for as long as the file stays open (reads of a chunk's file
// then take no system call at all); nil if the file cannot be mapped.
func (cf *cachedFile) view(n int) ([]byte, error) {
	cf.mapOnce.Do(func() {
		if v, ok := cf.f.(Viewer); ok {
			cf.mapped, cf.mapErr = v.Map(n)
		}
	})
	return cf.mapped, cf.mapErr
}

func newFileCache(max int) *fileCache {
	return &fileCache{max: max, files: map[fileKey]*cachedFile{}}
}

// get returns the open file for k, opening it with open if need be. The
// caller must put it back.
func (c *fileCache) get(k fileKey, open func() (File, error)) (*cachedFile, error) {
	c.mu.Lock()
	if cf := c.files[k]; cf != nil {
		cf.refs++
		cf.used = true
		c.mu.Unlock()
		return cf, nil
	}
	c.mu.Unlock()
	f, err := open()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.files[k]; cf != nil { // opened meanwhile by another reader
		f.Close()
		cf.refs++
		cf.used = true
		return cf, nil
	}
	if len(c.files) >= c.max {
		c.sweepLocked()
	}
	cf := &cachedFile{key: k, f: f, refs: 1, used: true}
	cf.size.Store(-1)
	c.files[k] = cf
	return cf, nil
}

// sweepLocked evicts one file: the first not read since the sweep last
// passed it, clearing the flag of each that was (in the map's order, which
// Go starts at random; a second round finds one if the first cleared all).
func (c *fileCache) sweepLocked() {
	for range 2 {
		for _, cf := range c.files {
			if !cf.used {
				c.evictLocked(cf)
				return
			}
			cf.used = false
		}
	}
}

func (c *fileCache) put(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.evicted && cf.refs == 0 {
		cf.f.Close()
	}
}

func (c *fileCache) evictLocked(cf *cachedFile) {
	if cf.evicted {
		return
	}
	cf.evicted = true
	delete(c.files, cf.key)
	if cf.refs == 0 {
		cf.f.Close()
	}
}

// written forgets the size of k's file, if it is open: it is being written.
func (c *fileCache) written(k fileKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.files[k]; cf != nil {
		cf.size.Store(-1)
	}
}

// evict drops k's file (the chunk is being removed).
func (c *fileCache) evict(k fileKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.files[k]; cf != nil {
		c.evictLocked(cf)
	}
}

// close drops everything.
func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cf := range c.files {
		c.evictLocked(cf)
	}
}
