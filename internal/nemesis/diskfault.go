package nemesis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// ownerFile, in a run's directory, holds the id of the process that runs
// it: a later run unmounts the tmpfs targets of a run whose process is
// gone (killed before its cleanup ran).
const ownerFile = "nemesis-owner"

// removeStaleMounts unmounts tmpfs file systems left under the directory
// of a run whose process is gone.
func removeStaleMounts() error {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return nil // no /proc: nothing can be found, nothing was mounted by us either
	}
	var errs []error
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "tmpfs" {
			continue
		}
		mnt := f[1]
		for dir, i := filepath.Dir(mnt), 0; i < 3 && dir != "/"; dir, i = filepath.Dir(dir), i+1 {
			owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(owner)))
			if err != nil || pid == os.Getpid() {
				break
			}
			if _, err := os.Stat(fmt.Sprint("/proc/", pid)); err == nil {
				break // its run is still going
			}
			if err := unmountKeeping(mnt); err != nil {
				errs = append(errs, err)
			}
			break
		}
	}
	return errors.Join(errs...)
}
