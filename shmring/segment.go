package shmring

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// hugePage is the huge page size segments round up to when they use them.
const hugePage = 2 << 20

// Segment is a memfd mapped into this process.
type Segment struct {
	fd   int
	mem  []byte
	huge bool
}

// NewSegment makes a segment of at least size bytes. With wantHuge it tries
// a hugetlb memfd first — which fails only at mmap when no huge pages are
// reserved, so it probes by mapping with MAP_POPULATE — and falls back to
// normal pages, which are only backed once touched (a large segment costs
// what is used of it). The size is sealed: neither side can shrink or grow
// it.
func NewSegment(name string, size int, wantHuge bool) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shmring: segment of %d bytes", size)
	}
	if wantHuge {
		if s, err := newSegment(name, roundUp(size, hugePage), unix.MFD_HUGETLB|unix.MFD_ALLOW_SEALING); err == nil {
			s.huge = true
			return s, nil
		}
	}
	if size >= hugePage {
		size = roundUp(size, hugePage) // whole huge pages, where the kernel gives them (adviseHuge)
	}
	return newSegment(name, roundUp(size, unix.Getpagesize()), unix.MFD_ALLOW_SEALING)
}

// ShmemTHP is the kernel's setting for transparent huge pages in shared
// memory (ShmemTHPMode reads it).
const ShmemTHP = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

// ShmemTHPMode is the kernel's current mode for transparent huge pages in
// shared memory (never, advise, always, within_size, deny, force), or ""
// where it cannot be read.
func ShmemTHPMode() string {
	b, err := os.ReadFile(ShmemTHP)
	if err != nil {
		return ""
	}
	mode := string(b)
	if i, j := strings.IndexByte(mode, '['), strings.IndexByte(mode, ']'); i >= 0 && j > i {
		mode = mode[i+1 : j] // the file lists every mode, the current one in brackets
	}
	return strings.TrimSpace(mode)
}

// TransparentHuge reports whether the kernel gives segments on normal
// pages transparent huge pages (see adviseHuge).
func TransparentHuge() bool {
	switch ShmemTHPMode() {
	case "advise", "always", "within_size", "force":
		return true
	}
	return false
}

// adviseHuge asks for transparent huge pages behind a mapping of a segment
// on normal pages. The kernel gives shared memory such pages only where the
// operator allows it (/sys/kernel/mm/transparent_hugepage/shmem_enabled set
// to advise or always; Debian's default is never), and then to the pages
// faulted in through a mapping so advised: both processes advise theirs.
// Nothing is reserved, and the advice is harmless where it is not taken.
func adviseHuge(mem []byte) {
	if len(mem) >= hugePage {
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func newSegment(name string, size, flags int) (*Segment, error) {
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shmring: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: size segment: %w", err)
	}
	populate := 0
	if flags&unix.MFD_HUGETLB != 0 { // the probe: fails here when none are reserved
		populate = unix.MAP_POPULATE
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|populate)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: map segment: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: seal segment: %w", err)
	}
	if flags&unix.MFD_HUGETLB == 0 {
		adviseHuge(mem)
	}
	return &Segment{fd: fd, mem: mem}, nil
}

// OpenSegment maps a segment received from another process (it takes fd).
func OpenSegment(fd int) (*Segment, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmring: stat segment: %w", err)
	}
	if st.Size <= 0 || st.Size > 1<<40 {
		return nil, fmt.Errorf("shmring: segment of %d bytes", st.Size)
	}
	// A segment that could shrink under us would turn our reads into SIGBUS.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shmring: segment not sealed against shrinking (%v)", err)
	}
	var fs unix.Statfs_t
	huge := unix.Fstatfs(fd, &fs) == nil && fs.Type == unix.HUGETLBFS_MAGIC
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmring: map segment: %w", err)
	}
	if !huge {
		adviseHuge(mem)
	}
	return &Segment{fd: fd, mem: mem, huge: huge}, nil
}

// Bytes is the mapped memory.
func (s *Segment) Bytes() []byte { return s.mem }

// Fd is the memfd, to hand to another process.
func (s *Segment) Fd() int { return s.fd }

// Huge reports whether the segment is on huge pages.
func (s *Segment) Huge() bool { return s.huge }

// Close unmaps the segment and closes its descriptor.
func (s *Segment) Close() error {
	err := unix.Munmap(s.mem)
	if cerr := unix.Close(s.fd); err == nil {
		err = cerr
	}
	return err
}
