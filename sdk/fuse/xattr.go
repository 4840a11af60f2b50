package fuse

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// Extended attributes go to the SDK (the names, sizes and flags it takes
// are fsmeta.CheckXattr's). The kernel checks who may use trusted.*; the
// mount lets only root set or remove security.* (labels are the
// administrator's to set).

func (fs *FS) GetXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string, dest []byte) (uint32, gofuse.Status) {
	caps := attr == capability
	if caps && fs.noCaps.has(h.NodeId) {
		fs.stats.CapsRemembered.Add(1)
		return 0, gofuse.ENOATTR
	}
	ctx, done := fs.op()
	defer done()
	v, err := fs.c.GetXattrAt(ctx, h.NodeId, "", attr)
	if caps && errors.Is(err, sdk.ErrNoXattr) {
		fs.noCaps.add(h.NodeId, fs.cfg.AttrTimeout)
	}
	if err != nil {
		return 0, fs.errno("getxattr", h.NodeId, err)
	}
	return fill(dest, v)
}

// capability is the attribute the kernel reads before every write to a
// file (to drop file capabilities, as it drops setuid): FUSE gives it no
// way to remember the answer, so the mount remembers that a file has
// none, for as long as the kernel caches attributes (AttrTimeout). A
// change through this mount forgets it at once.
const capability = "security.capability"

// capCache is the inodes known, until a time, to have no capability.
type capCache struct {
	mu    sync.Mutex
	until map[uint64]time.Time
}

// capCacheMax bounds the cache; past it, it starts again empty.
const capCacheMax = 1 << 16

func (c *capCache) has(ino uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.until[ino])
}

func (c *capCache) add(ino uint64, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil || len(c.until) >= capCacheMax {
		c.until = map[uint64]time.Time{}
	}
	c.until[ino] = time.Now().Add(ttl)
}

func (c *capCache) forget(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, ino)
}

func (fs *FS) ListXAttr(cancel <-chan struct{}, h *gofuse.InHeader, dest []byte) (uint32, gofuse.Status) {
	ctx, done := fs.op()
	defer done()
	names, err := fs.c.ListXattrAt(ctx, h.NodeId, "")
	if err != nil {
		return 0, fs.errno("listxattr", h.NodeId, err)
	}
	var list []byte
	for _, n := range names {
		list = append(append(list, n...), 0)
	}
	return fill(dest, list)
}

// fill copies v into dest, or answers ERANGE with v's length when dest is
// too small (a caller asking for the size passes none).
func fill(dest, v []byte) (uint32, gofuse.Status) {
	if len(dest) < len(v) {
		return uint32(len(v)), gofuse.ERANGE
	}
	return uint32(copy(dest, v)), gofuse.OK
}

func (fs *FS) SetXAttr(cancel <-chan struct{}, in *gofuse.SetXAttrIn, attr string, data []byte) gofuse.Status {
	if st := securityByRoot(&in.InHeader, attr); !st.Ok() {
		return st
	}
	if attr == capability {
		fs.noCaps.forget(in.NodeId)
	}
	ctx, done := fs.op()
	defer done()
	err := fs.c.SetXattrAt(ctx, in.NodeId, "", attr, data, in.Flags)
	fs.names.touched(in.NodeId) // its ctime
	return fs.status("setxattr", in.NodeId, err)
}

func (fs *FS) RemoveXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string) gofuse.Status {
	if st := securityByRoot(h, attr); !st.Ok() {
		return st
	}
	if attr == capability {
		fs.noCaps.forget(h.NodeId)
	}
	ctx, done := fs.op()
	defer done()
	err := fs.c.RemoveXattrAt(ctx, h.NodeId, "", attr)
	fs.names.touched(h.NodeId)
	return fs.status("removexattr", h.NodeId, err)
}

// securityByRoot refuses changes to security.* by anyone but root.
func securityByRoot(h *gofuse.InHeader, attr string) gofuse.Status {
	if strings.HasPrefix(attr, "security.") && h.Uid != 0 {
		return gofuse.Status(syscall.EPERM)
	}
	return gofuse.OK
}

// status is OK, or err's errno.
func (fs *FS) status(op string, ino uint64, err error) gofuse.Status {
	if err != nil {
		return fs.errno(op, ino, err)
	}
	return gofuse.OK
}
