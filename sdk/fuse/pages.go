package fuse

import (
	"sync"

	"github.com/sluicefs/sluice/sdk"
)

// pages decides at each open whether the kernel may keep what its page
// cache holds of the file (FOPEN_KEEP_CACHE) instead of dropping it: only
// when the file's length, modification and change times are what they
// were at this mount's previous open of it, as NFS and JuiceFS judge.
// Every close that wrote to a file sets its times (the length's command in
// the metadata service), and so does every change of its length or
// attributes, whoever made it; so a second `cat` of a file nobody changed
// is read from memory, and any change made before an open is seen by it
// (close-to-open). Opens with O_TRUNC never keep.
type pages struct {
	mu   sync.Mutex
	seen map[uint64]stamp // by inode: at the last open here
}

type stamp struct{ size, mtime, ctime int64 }

// maxStamps bounds what pages remembers: past it, it starts over (the
// files then drop their pages at their next open, once).
const maxStamps = 1 << 20

// opened records file in's state at an open and reports whether it is the
// same as at the previous open.
func (p *pages) opened(in *sdk.FileInfo) bool {
	s := stamp{in.Size(), in.ModTime().UnixNano(), in.ChangeTime().UnixNano()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil || len(p.seen) >= maxStamps {
		p.seen = map[uint64]stamp{}
	}
	prev, ok := p.seen[in.Ino()]
	p.seen[in.Ino()] = s
	return ok && prev == s
}

// forget drops what it knows of inode ino: the kernel forgot the inode,
// and its pages with it.
func (p *pages) forget(ino uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, ino)
}
