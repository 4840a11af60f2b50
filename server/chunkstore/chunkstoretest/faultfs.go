package chunkstoretest

import (
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/sluicefs/sluice/server/chunkstore"
)

// Fault is an injected failure of FaultFS.
type Fault struct {
	// Op is "create" (any open for writing), "write", "sync", "read",
	// "remove" or "" for all.
	Op string
	// Match selects files whose path contains it ("" for all).
	Match string
	// Err is returned (default: an I/O error).
	Err error
	// LoseWrites makes writes report success without storing anything: a
	// disk that lies. Err is then ignored.
	LoseWrites bool
}

// FaultFS wraps an FS and fails operations by rule.
type FaultFS struct {
	chunkstore.FS
	mu     sync.Mutex
	faults []Fault
}

// NewFaultFS wraps fs.
func NewFaultFS(fs chunkstore.FS) *FaultFS { return &FaultFS{FS: fs} }

// Inject adds a fault; Clear removes them all.
func (f *FaultFS) Inject(x Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if x.Err == nil {
		x.Err = syscall.EIO
	}
	f.faults = append(f.faults, x)
}

func (f *FaultFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

func (f *FaultFS) match(op, name string) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.faults {
		if (x.Op == "" || x.Op == op) && strings.Contains(name, x.Match) {
			return x, true
		}
	}
	return Fault{}, false
}

func (f *FaultFS) fail(op, name string) error {
	if x, ok := f.match(op, name); ok && !x.LoseWrites {
		return &os.PathError{Op: op, Path: name, Err: x.Err}
	}
	return nil
}

func (f *FaultFS) Create(name string) (chunkstore.File, error) {
	if err := f.fail("create", name); err != nil {
		return nil, err
	}
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

func (f *FaultFS) OpenWrite(name string) (chunkstore.File, bool, error) {
	if err := f.fail("create", name); err != nil {
		return nil, false, err
	}
	file, created, err := f.FS.OpenWrite(name)
	if err != nil {
		return nil, false, err
	}
	return &faultFile{File: file, fs: f, name: name}, created, nil
}

func (f *FaultFS) Open(name string) (chunkstore.File, error) {
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

func (f *FaultFS) Remove(name string) error {
	if err := f.fail("remove", name); err != nil {
		return err
	}
	return f.FS.Remove(name)
}

type faultFile struct {
	chunkstore.File
	fs   *FaultFS
	name string
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if x, ok := f.fs.match("write", f.name); ok {
		if x.LoseWrites {
			return len(p), nil
		}
		return 0, &os.PathError{Op: "write", Path: f.name, Err: x.Err}
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.fail("read", f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fail("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}
