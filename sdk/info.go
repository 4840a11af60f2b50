package sdk

import (
	"fmt"
	"io/fs"
	"path"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
)

// FileInfo is an inode as the SDK returns it (Stat, the *At calls,
// File.Inode, DirEntry.Info). It is an fs.FileInfo, so it works with
// io/fs code as it is; the methods past fs.FileInfo's are what a POSIX
// layer (the FUSE mount) needs besides. The protobuf inode it is made from
// stays on the wire: a FileInfo is a value of its own, safe to keep and to
// share.
type FileInfo struct {
	name                string
	ino                 uint64
	mode                fs.FileMode
	size                int64
	nlink               uint32
	uid, gid            uint32
	atime, mtime, ctime time.Time
	target              string
	chunkSize           uint32
	written             uint64 // files: the written mark (metapb.Inode.written), or the length where there is none
	rdev                uint32
}

var _ fs.FileInfo = (*FileInfo)(nil)

// newFileInfo converts an inode the cluster sent; name is the last name of
// the path it was found by ("" when it was named by inode alone).
func newFileInfo(name string, in *metapb.Inode) *FileInfo {
	if in == nil {
		return nil
	}
	fi := &FileInfo{name: name, ino: in.Ino, mode: typeMode[in.Type] | unixPerm(in.Mode),
		size: int64(in.Size), nlink: in.Nlink, uid: in.Uid, gid: in.Gid,
		atime: time.Unix(0, in.AtimeNs), mtime: time.Unix(0, in.MtimeNs), ctime: time.Unix(0, in.CtimeNs),
		target: in.Target, chunkSize: in.Layout.GetChunkSize(), written: writtenMark(in), rdev: in.Rdev}
	return fi
}

// writtenMark is a file's written mark (metapb.Inode.written), or its
// length where it has none (records from before the mark).
func writtenMark(in *metapb.Inode) uint64 {
	if in.Written != nil {
		return *in.Written
	}
	return in.Size
}

// baseName is the name FileInfo.Name reports for (at, p): its last name,
// "/" for the root, "" for inode at itself.
func baseName(at uint64, p string) string {
	if p == "" || (at == 0 && p == "/") {
		if at == 0 {
			return "/"
		}
		return ""
	}
	return path.Base(p)
}

// typeMode is each inode type's fs.FileMode type bits.
var typeMode = map[metapb.InodeType]fs.FileMode{
	metapb.InodeType_FILE:         0,
	metapb.InodeType_DIRECTORY:    fs.ModeDir,
	metapb.InodeType_SYMLINK:      fs.ModeSymlink,
	metapb.InodeType_FIFO:         fs.ModeNamedPipe,
	metapb.InodeType_CHAR_DEVICE:  fs.ModeDevice | fs.ModeCharDevice,
	metapb.InodeType_BLOCK_DEVICE: fs.ModeDevice,
	metapb.InodeType_SOCKET:       fs.ModeSocket,
}

// unixPerm turns stat(2)'s permission bits (with setuid, setgid and
// sticky) into fs.FileMode's.
func unixPerm(m uint32) fs.FileMode {
	p := fs.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		p |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		p |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		p |= fs.ModeSticky
	}
	return p
}

// Name is the last name of the path the inode was found by; "/" for the
// root, and "" for an inode named by number alone (StatAt(ctx, ino, "")).
func (fi *FileInfo) Name() string { return fi.name }

// Size is the file's length in bytes (a symlink's is its target's length,
// a directory's 0).
func (fi *FileInfo) Size() int64 { return fi.size }

// Mode is the permission bits (with fs.ModeSetuid, fs.ModeSetgid and
// fs.ModeSticky) and fs.ModeDir or fs.ModeSymlink for directories and
// symbolic links.
func (fi *FileInfo) Mode() fs.FileMode { return fi.mode }

// ModTime is the time the contents last changed (mtime).
func (fi *FileInfo) ModTime() time.Time { return fi.mtime }

// IsDir reports whether the inode is a directory.
func (fi *FileInfo) IsDir() bool { return fi.mode.IsDir() }

// Sys returns nil: everything the cluster says of an inode has a method.
func (fi *FileInfo) Sys() any { return nil }

// Ino is the inode number. Numbers are never reused.
func (fi *FileInfo) Ino() uint64 { return fi.ino }

// Nlink is the number of names the inode has (a directory's count
// includes its "." and its subdirectories' "..").
func (fi *FileInfo) Nlink() uint32 { return fi.nlink }

// UID and GID are the owner and group.
func (fi *FileInfo) UID() uint32 { return fi.uid }
func (fi *FileInfo) GID() uint32 { return fi.gid }

// AccessTime and ChangeTime are atime and ctime (ModTime is mtime).
func (fi *FileInfo) AccessTime() time.Time { return fi.atime }
func (fi *FileInfo) ChangeTime() time.Time { return fi.ctime }

// Target is a symbolic link's target; "" for other inodes.
func (fi *FileInfo) Target() string { return fi.target }

// ChunkSize is the size of the chunks a file's bytes are cut into on
// storage (a directory's is the one its new files get).
func (fi *FileInfo) ChunkSize() uint32 { return fi.chunkSize }

// Rdev is a device node's device number (stat(2)'s st_rdev); 0 for
// other inodes.
func (fi *FileInfo) Rdev() uint32 { return fi.rdev }

// UnixMode is the mode as stat(2)'s st_mode has it: the type (S_IFREG,
// S_IFDIR, S_IFLNK, S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK), and the
// permission bits with setuid, setgid and sticky.
func (fi *FileInfo) UnixMode() uint32 {
	m := uint32(fi.mode.Perm())
	if fi.mode&fs.ModeSetuid != 0 {
		m |= syscall.S_ISUID
	}
	if fi.mode&fs.ModeSetgid != 0 {
		m |= syscall.S_ISGID
	}
	if fi.mode&fs.ModeSticky != 0 {
		m |= syscall.S_ISVTX
	}
	return m | UnixType(fi.mode)
}

// UnixType is the stat(2) type bits (S_IFREG, S_IFDIR, ...) of mode's
// type.
func UnixType(mode fs.FileMode) uint32 {
	switch mode.Type() {
	case fs.ModeDir:
		return syscall.S_IFDIR
	case fs.ModeSymlink:
		return syscall.S_IFLNK
	case fs.ModeNamedPipe:
		return syscall.S_IFIFO
	case fs.ModeDevice | fs.ModeCharDevice:
		return syscall.S_IFCHR
	case fs.ModeDevice:
		return syscall.S_IFBLK
	case fs.ModeSocket:
		return syscall.S_IFSOCK
	}
	return syscall.S_IFREG
}

// withSize is fi with another length (a handle's own idea of it).
func (fi *FileInfo) withSize(n int64) *FileInfo {
	c := *fi
	c.size = n
	return &c
}

// DirEntry is one name in a directory, as ReadDir and ListAt return it: an
// fs.DirEntry whose Info needs no further call (the listing carries every
// entry's inode).
type DirEntry struct {
	name string
	ino  uint64
	typ  fs.FileMode
	info *FileInfo // nil for an entry whose inode went between listing and stat
}

var _ fs.DirEntry = DirEntry{}

func newDirEntry(e *metapb.DirEntry, in *metapb.Inode) DirEntry {
	d := DirEntry{name: e.Name, ino: e.Ino, typ: typeMode[e.Type]}
	if in != nil {
		d.info = newFileInfo(e.Name, in)
	}
	return d
}

// Name is the entry's name in its directory.
func (d DirEntry) Name() string { return d.name }

// IsDir reports whether the entry names a directory.
func (d DirEntry) IsDir() bool { return d.typ.IsDir() }

// Type is the entry's type bits: 0, fs.ModeDir or fs.ModeSymlink.
func (d DirEntry) Type() fs.FileMode { return d.typ }

// Ino is the inode number the entry names.
func (d DirEntry) Ino() uint64 { return d.ino }

// Info is the entry's inode as of the listing. For one removed between
// listing the name and reading its inode it is an error that matches
// ErrNotExist (and fs.ErrNotExist), as os.DirEntry's is.
func (d DirEntry) Info() (fs.FileInfo, error) {
	if d.info == nil {
		return nil, fmt.Errorf("stat %s: %w", d.name, ErrNotExist)
	}
	return d.info, nil
}

// FileInfo is Info as the SDK's own type, nil where Info fails.
func (d DirEntry) FileInfo() *FileInfo { return d.info }
