package fuse

import (
	"sync"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// names is the mount's memory of names it has looked up in bulk: when the
// kernel's lookups in one directory keep missing its own entry cache (a
// `stat` of every file, `find`, `rm -r`, an rsync pass), the mount lists the
// directory with every entry's attributes in one call (List with inodes,
// the readdirplus request) and answers the following lookups there, each
// with what is left of the entry and attribute timeouts counted from the
// listing. So a name is never older than the kernel's own cache would let
// it be, and a remote change shows after the same timeout as before.
//
// What this mount changes itself it applies at once: a name it made is
// added, a name it removed is dropped, and an inode whose attributes it
// changed (a write, a truncate, a chmod, an extended attribute, a link)
// is not answered from memory again until a later fetch. A fetch that a
// local change overtook is not kept: every change takes a generation
// number, and attributes fetched before an inode's last change are
// stale. Negative answers are never given from memory (the kernel is
// told not to cache them either), so a name made elsewhere is found at
// once, as before.
type names struct {
	entryTTL, attrTTL time.Duration

	mu      sync.Mutex
	gen     uint64                // counts this mount's changes
	changed map[uint64]uint64     // inode → the generation of its last change here
	dirs    map[uint64]*dirMemory // by directory inode
	count   int                   // names held, over all dirs
	attrs   map[uint64]attrEntry  // directories' attributes (dirAttr)
}

// attrEntry is a directory's attributes as fetched at at, from generation
// gen, then moved on by this mount's creates in it.
type attrEntry struct {
	a   gofuse.Attr
	at  time.Time
	gen uint64
}

// dirMemory is one directory's names and its lookup misses.
type dirMemory struct {
	ents     map[string]nameEntry
	misses   int       // lookups sent to the cluster since window began
	window   time.Time // when this count of misses began
	due      int       // the misses that pay for a listing
	listing  bool      // a listing is on its way
	listedAt time.Time // when the last listing kept was taken (zero: none)
}

type nameEntry struct {
	fi  *sdk.FileInfo
	at  time.Time // when fetched
	gen uint64    // the generation the fetch began at
}

const (
	// minListMisses lookups in a directory within one entry timeout go to
	// the cluster one by one before the directory is listed instead.
	minListMisses = 8
	// listCost is how many listed entries cost about one lookup's round
	// trip: a directory of n entries is listed again only after n/listCost
	// misses, so a listing never costs more than the lookups it saves
	// would have.
	listCost = 32
	// maxNames bounds what the mount holds (about 200 bytes a name);
	// past it everything is dropped.
	maxNames = 1 << 16
	// maxListed is the largest directory listed whole.
	maxListed = 1 << 15
)

func newNames(entryTTL, attrTTL time.Duration) *names {
	return &names{entryTTL: entryTTL, attrTTL: attrTTL, changed: map[uint64]uint64{}, dirs: map[uint64]*dirMemory{}, attrs: map[uint64]attrEntry{}}
}

// lookup answers (dir, name) from memory: the inode and the entry and
// attribute timeouts left, or nil.
func (n *names) lookup(dir uint64, name string, now time.Time) (*sdk.FileInfo, time.Duration, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.dirs[dir]
	if d == nil {
		return nil, 0, 0
	}
	e, ok := d.ents[name]
	if !ok {
		return nil, 0, 0
	}
	age := now.Sub(e.at)
	if age >= n.entryTTL || age >= n.attrTTL {
		delete(d.ents, name)
		n.count--
		return nil, 0, 0
	}
	if n.changed[e.fi.Ino()] > e.gen { // kept: the name still says which inode it was
		return nil, 0, 0
	}
	return e.fi, n.entryTTL - age, n.attrTTL - age
}

// missed counts a lookup in dir that the cluster answered with an inode
// and says whether the directory should now be listed (the caller then
// lists it and calls listed), with the generation the listing begins at.
// Lookups of names that do not exist are not counted: a listing, which
// answers only names it holds, would not have saved them.
func (n *names) missed(dir uint64, now time.Time) (list bool, gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.dir(dir)
	if now.Sub(d.window) >= n.entryTTL {
		d.window, d.misses = now, 0
	}
	d.misses++
	if d.listing || d.misses < max(minListMisses, d.due) {
		return false, n.gen
	}
	d.listing = true
	return true, n.gen
}

func (n *names) dir(ino uint64) *dirMemory {
	d := n.dirs[ino]
	if d == nil {
		if len(n.dirs) >= maxNames { // a walk over many directories
			n.forgetAll()
		}
		d = &dirMemory{ents: map[string]nameEntry{}}
		n.dirs[ino] = d
	}
	return d
}

// listed keeps a listing of dir fetched from generation gen at time at
// (ents nil when it failed or the directory was too large).
func (n *names) listed(dir uint64, gen uint64, at time.Time, ents []sdk.DirEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.dir(dir)
	d.listing, d.misses, d.window = false, 0, at
	if ents == nil {
		d.due = maxListed / listCost
		return
	}
	d.due = len(ents) / listCost
	if n.changed[dir] > gen { // the directory changed here meanwhile
		return
	}
	if n.count+len(ents) > maxNames {
		n.forgetAll()
		d = n.dir(dir)
	}
	d.listedAt = at
	for _, e := range ents {
		fi := e.FileInfo()
		if fi == nil || n.changed[fi.Ino()] > gen {
			continue
		}
		if _, had := d.ents[e.Name()]; !had {
			n.count++
		}
		d.ents[e.Name()] = nameEntry{fi: fi, at: at, gen: gen}
	}
}

// made records a name this mount made (or linked) in dir, with the inode
// the cluster answered, and the directory's own change. stamped says the
// directory's mtime and ctime became the new inode's ctime (one command
// stamps both when it makes an inode), so remembered attributes of the
// directory stay good with those times (and one more link for a new
// directory).
func (n *names) made(dir uint64, name string, fi *sdk.FileInfo, at time.Time, stamped bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.attrs[dir]
	fresh := ok && n.changed[dir] <= e.gen
	n.touch(dir)
	n.touch(fi.Ino())
	if fresh && stamped {
		if s, ns := unixTime(fi.ChangeTime()); s > e.a.Mtime || s == e.a.Mtime && ns > e.a.Mtimensec {
			e.a.Mtime, e.a.Mtimensec, e.a.Ctime, e.a.Ctimensec = s, ns, s, ns
		}
		if fi.IsDir() {
			e.a.Nlink++
		}
		e.gen = n.gen // still bounded by its fetch's time
		n.attrs[dir] = e
	}
	d := n.dirs[dir]
	if d == nil { // only directories being looked up in keep names
		return
	}
	if _, had := d.ents[name]; !had {
		n.count++
	}
	d.ents[name] = nameEntry{fi: fi, at: at, gen: n.gen}
}

// removed records that this mount removed (dir, name), renamed it away or
// renamed something over it. The inode it named changed too (its link
// count) and may be held under other names, so it is marked changed; when
// the mount does not know which inode that was, it forgets everything,
// unless a listing of the directory within the entry timeout, kept up to
// date with this mount's changes since, says there was no such name.
func (n *names) removed(dir uint64, name string, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.touch(dir)
	d := n.dirs[dir]
	if d == nil {
		n.forgetAll()
		return
	}
	e, ok := d.ents[name]
	if !ok {
		if d.listedAt.IsZero() || now.Sub(d.listedAt) >= n.entryTTL {
			n.forgetAll()
		}
		return
	}
	delete(d.ents, name)
	n.count--
	n.touch(e.fi.Ino())
}

// dirAttr answers a directory's attributes from memory: fetched within
// the attribute timeout and changed since only by this mount's creates in
// it (made). The kernel drops a directory's attributes at every change in
// it and asks again before the next create there (its permission check),
// so a run of creates would otherwise cost a round trip each.
func (n *names) dirAttr(ino uint64, now time.Time) (gofuse.Attr, time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.attrs[ino]
	if !ok {
		return gofuse.Attr{}, 0, false
	}
	age := now.Sub(e.at)
	if age >= n.attrTTL || n.changed[ino] > e.gen {
		delete(n.attrs, ino)
		return gofuse.Attr{}, 0, false
	}
	return e.a, n.attrTTL - age, true
}

// keepDirAttr remembers a directory's attributes fetched at at, from
// generation gen, unless this mount changed it since.
func (n *names) keepDirAttr(ino uint64, a gofuse.Attr, gen uint64, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.changed[ino] > gen {
		return
	}
	if len(n.attrs) >= maxNames {
		clear(n.attrs)
	}
	n.attrs[ino] = attrEntry{a: a, at: at, gen: gen}
}

// generation is the count of this mount's changes so far: a fetch begun
// now is stale for any inode changed after it.
func (n *names) generation() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gen
}

// touched records that this mount changed inode ino's attributes.
func (n *names) touched(ino uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.touch(ino)
}

func (n *names) touch(ino uint64) {
	n.gen++
	n.changed[ino] = n.gen
	if len(n.changed) > maxNames {
		n.forgetAll()
	}
}

// forgetAll drops every name; what is fetched from now on is newer than
// every change (n.mu held).
func (n *names) forgetAll() {
	n.gen++
	clear(n.changed)
	clear(n.attrs)
	for ino, d := range n.dirs {
		if d.listing {
			// its fetch began before now: it must not be kept
			d.ents, d.listedAt = map[string]nameEntry{}, time.Time{}
			n.changed[ino] = n.gen
			continue
		}
		delete(n.dirs, ino)
	}
	n.count = 0
}
