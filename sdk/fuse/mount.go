package fuse

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// Mount is a mounted file system, served until Unmount (or until someone
// unmounts it from outside, e.g. fusermount3 -u).
type Mount struct {
	Dir    string
	FS     *FS
	server *gofuse.Server
	done   chan struct{}
}

// New mounts client c's cluster at dir and serves it in the background. A
// stale mount left at dir by a process that died is cleaned up first.
func New(c *sdk.Client, dir string, cfg Config) (*Mount, error) {
	fs := NewFS(c, cfg)
	if err := CleanStale(dir); err != nil {
		return nil, err
	}
	opts := &gofuse.MountOptions{
		FsName:       "sluice",
		Name:         "sluice",
		MaxWrite:     1 << 20,
		MaxReadAhead: 1 << 20,
		AllowOther:   fs.cfg.AllowOther,
		// The kernel checks permissions against the attributes we return,
		// as for a local file system.
		Options:       []string{"default_permissions"},
		DirectMount:   os.Geteuid() == 0, // no fusermount3 needed as root
		EnableLocks:   true,              // flock and POSIX locks held cluster-wide (locks.go)
		DisableSplice: true,              // 1 MiB requests do not fit the default pipe; plain reads are as fast here
	}
	srv, err := gofuse.NewServer(fs, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m := &Mount{Dir: dir, FS: fs, server: srv, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		srv.Serve()
		fs.cache.close() // no request is being served any more
	}()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		<-m.done
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if err := setKernelReadahead(dir, fs.cfg.KernelReadahead); err != nil {
		fs.log.Warn("fuse: kernel readahead left at its default", "dir", dir, "err", err)
	}
	return m, nil
}

// setKernelReadahead sets the kernel's readahead for the mount (the
// backing device's read_ahead_kb, which FUSE otherwise leaves at 128 KiB):
// with more, a sequential reader's requests come 1 MiB at a time and
// several at once. It needs root; elsewhere the default stays.
func setKernelReadahead(dir string, bytes int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(strconv.Itoa(bytes>>10)), 0o644)
}

// Done is closed once the file system is no longer served (unmounted).
func (m *Mount) Done() <-chan struct{} { return m.done }

// Unmount unmounts and waits until serving has stopped. It fails (EBUSY)
// while a process still has a file open or its working directory inside.
func (m *Mount) Unmount() error {
	select {
	case <-m.done:
		return nil // already unmounted (from outside, or forced)
	default:
	}
	if err := m.server.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", m.Dir, err)
	}
	<-m.done
	return nil
}

// Close unmounts like Unmount, or, while files are still open there,
// detaches the mount lazily (the kernel lets it go once they close) and
// waits for serving to stop.
func (m *Mount) Close() error {
	if err := m.Unmount(); err == nil {
		return nil
	}
	if err := detach(m.Dir); err != nil {
		return err
	}
	<-m.done
	return nil
}

// CleanStale detects a mount at dir whose serving process is gone (every
// access fails with ENOTCONN, "transport endpoint is not connected") and
// detaches it, so that dir can be mounted again.
func CleanStale(dir string) error {
	_, err := os.Stat(dir)
	if err == nil || !errors.Is(err, syscall.ENOTCONN) {
		return nil // not mounted, or a live mount: mounting over it reports the error
	}
	if err := detach(dir); err != nil {
		return fmt.Errorf("clean up the stale mount: %w", err)
	}
	return nil
}

// detach unmounts dir lazily (umount -l).
func detach(dir string) error {
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("detach %s: %w", dir, err)
		}
		return nil
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("detach %s: %w: %s", dir, err, out)
	}
	return nil
}
