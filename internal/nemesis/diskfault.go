package nemesis

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ballastName is the file that fills a target's disk.
const ballastName = "nemesis-ballast"

// FillDisk fills the file system holding dir until leave bytes are free,
// with one allocated file; EmptyDisk removes it.
func FillDisk(dir string, leave int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("fill disk %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= leave {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, ballastName), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("fill disk %s: %w", dir, err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, fi.Size()+free-leave); err != nil {
		return fmt.Errorf("fill disk %s: allocate %d bytes: %w", dir, free-leave, err)
	}
	return nil
}

// EmptyDisk removes FillDisk's ballast.
func EmptyDisk(dir string) error {
	if err := os.Remove(filepath.Join(dir, ballastName)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("empty disk %s: %w", dir, err)
	}
	return nil
}
