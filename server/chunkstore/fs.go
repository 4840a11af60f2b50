package chunkstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// FS is the seam every chunk-data access goes through, so tests can inject
// errors and lost writes without disk tricks. OSFS is the real one;
// chunkstoretest.FaultFS wraps any FS.
type FS interface {
	// Create makes (or truncates) a file for writing.
	Create(name string) (File, error)
	// OpenWrite opens a file for writing in place, creating it if need be;
	// created says whether it did (so the caller knows to sync the directory).
	OpenWrite(name string) (f File, created bool, err error)
	// Open opens a file for reading.
	Open(name string) (File, error)
	Remove(name string) error
	MkdirAll(name string) error
	// List returns the names in a directory.
	List(dir string) ([]string, error)
	// SyncDir makes the directory's entries durable.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	// Sync makes the file's data (and its size) durable.
	Sync() error
	Close() error
}

// Viewer is a File whose bytes can be read in place, without a copy.
// OSFS's files are; chunkstoretest.FaultFS's are not, so fault tests take
// the copying path.
type Viewer interface {
	// Map maps the file's first n bytes read-only, shared with the page
	// cache, so that writes to the file show through. n may exceed the
	// file's size, but bytes past the end must never be touched (that
	// faults). The mapping ends when the file is closed.
	Map(n int) ([]byte, error)
	// Size is the file's current size.
	Size() (int64, error)
}

// OSFS is FS on the operating system's files.
type OSFS struct{}

// osFile syncs with fdatasync: the data and the size, not the timestamps.
type osFile struct {
	*os.File
	mapped []byte // see Map; unmapped by Close
}

func (f *osFile) Map(n int) ([]byte, error) {
	if f.mapped != nil {
		return nil, errors.New("file mapped twice")
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	f.mapped = b
	return b, nil
}

func (f *osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *osFile) Close() error {
	if f.mapped != nil {
		syscall.Munmap(f.mapped)
		f.mapped = nil
	}
	return f.File.Close()
}

func (f *osFile) Sync() error { return syscall.Fdatasync(int(f.Fd())) }

// Truncate leaves a file that already has the size alone: chunks are
// rewritten in place at the same size most of the time, and a truncate to
// the same size still changes the inode, which the next fdatasync then has
// to journal (it cost a third more per synced 1 MiB write here).
func (f *osFile) Truncate(size int64) error {
	if st, err := f.Stat(); err == nil && st.Size() == size {
		return nil
	}
	return f.File.Truncate(size)
}

func (OSFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{File: f}, nil
}

func (OSFS) OpenWrite(name string) (File, bool, error) {
	// The file exists nearly always (chunks are rewritten in place), so try
	// that first: one system call instead of two.
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err == nil {
		return &osFile{File: f}, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return &osFile{File: f}, true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, false, err
	}
	// Created meanwhile by someone else.
	f, err = os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	return &osFile{File: f}, false, nil
}

func (OSFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{File: f}, nil
}
func (OSFS) Remove(name string) error   { return os.Remove(name) }
func (OSFS) MkdirAll(name string) error { return os.MkdirAll(name, 0o755) }

func (OSFS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// isNotExist reports a missing file through any FS.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

func join(parts ...string) string { return filepath.Join(parts...) }
