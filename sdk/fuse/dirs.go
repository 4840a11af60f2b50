package fuse

import (
	"context"
	"sync"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// dirHandle is a directory listing taken at opendir (and again at a
// rewind), served to the kernel in pieces by offset: entry i of the
// listing has offset i+1, after "." and "..".
type dirHandle struct {
	mu      sync.Mutex
	ino     uint64
	entries []sdk.DirEntry // FileInfo nil where an entry went meanwhile
}

// listPage is how many entries one List call asks for.
const listPage = 1000

func (fs *FS) list(ctx context.Context, d *dirHandle) (err error) {
	d.entries, _, err = fs.listDir(ctx, d.ino, d.entries[:0], 0)
	return err
}

// listDir appends directory dir's entries, each with its attributes, to
// ents, in pages; with limit > 0 it stops past limit entries and says the
// listing is not whole.
func (fs *FS) listDir(ctx context.Context, dir uint64, ents []sdk.DirEntry, limit int) ([]sdk.DirEntry, bool, error) {
	after := ""
	for {
		page, more, err := fs.c.ListAt(ctx, dir, "", after, listPage)
		if err != nil {
			return ents, false, err
		}
		ents = append(ents, page...)
		if limit > 0 && len(ents) > limit {
			return ents, false, nil
		}
		if !more || len(page) == 0 {
			return ents, true, nil
		}
		after = page[len(page)-1].Name()
	}
}

func (fs *FS) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	d := &dirHandle{ino: in.NodeId}
	if err := fs.list(ctx, d); err != nil {
		return fs.errno("opendir", in.NodeId, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nextFh++
	fs.dirs[fs.nextFh] = d
	out.Fh = fs.nextFh
	return gofuse.OK
}

func (fs *FS) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.readDir(in, out, false)
}

func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.readDir(in, out, true)
}

// readDir adds entries from the offset the kernel asks for until out is
// full; with plus, each with its attributes (readdirplus), so that `ls -l`
// needs no lookup per name.
func (fs *FS) readDir(in *gofuse.ReadIn, out *gofuse.DirEntryList, plus bool) gofuse.Status {
	fs.mu.Lock()
	d := fs.dirs[in.Fh]
	fs.mu.Unlock()
	if d == nil {
		return gofuse.EBADF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.Offset == 0 && len(d.entries) > 0 { // rewinddir: list afresh
		ctx, done := fs.op()
		defer done()
		if err := fs.list(ctx, d); err != nil {
			return fs.errno("readdir", in.NodeId, err)
		}
	}
	for off := in.Offset; off < uint64(len(d.entries))+2; off++ {
		e := gofuse.DirEntry{Off: off + 1, Mode: syscall.S_IFDIR}
		var ino *sdk.FileInfo
		switch off {
		case 0:
			e.Name, e.Ino = ".", d.ino
		case 1:
			e.Name, e.Ino = "..", gofuse.FUSE_UNKNOWN_INO
		default:
			ent := d.entries[off-2]
			ino = ent.FileInfo()
			e.Name, e.Ino, e.Mode = ent.Name(), ent.Ino(), sdk.UnixType(ent.Type())
		}
		if !plus {
			if !out.AddDirEntry(e) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			break
		}
		if ino != nil { // "." and "..", and entries gone meanwhile, carry no attributes
			fs.fillEntry(ino, eo)
		}
	}
	return gofuse.OK
}

func (fs *FS) ReleaseDir(in *gofuse.ReleaseIn) {
	fs.mu.Lock()
	delete(fs.dirs, in.Fh)
	fs.mu.Unlock()
}

func (fs *FS) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return gofuse.OK // every namespace change is committed through Raft before it returns
}
