package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/sdk"
)

// TestConformance is Sluice's own table of POSIX cases over a real mount,
// run as root: special files (fifos, device nodes, unix sockets), extended
// attributes, fallocate, and the errno each failure gets. Each case names
// the call, what it did, and the errno POSIX (Linux) gives; 0 is success.
func TestConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: device nodes, trusted.* and security.* attributes")
	}
	mt := mount(t, 64<<10)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.WriteFile(at("f"), []byte("file"), 0o644))
	must(t, os.Mkdir(at("d"), 0o755))
	must(t, os.Symlink("f", at("l")))
	long := strings.Repeat("n", 256)

	statIs := func(p string, typ, perm, rdev uint32) func() error {
		return func() error {
			var st unix.Stat_t
			if err := unix.Lstat(at(p), &st); err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT != typ || st.Mode&0o7777 != perm || uint32(st.Rdev) != rdev {
				t.Errorf("%s: mode %#o rdev %#x, want type %#o perm %#o rdev %#x", p, st.Mode, st.Rdev, typ, perm, rdev)
			}
			return nil
		}
	}
	getx := func(p, name string, size int) ([]byte, error) {
		buf := make([]byte, size)
		n, err := unix.Getxattr(at(p), name, buf)
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	wantX := func(p, name, want string) func() error {
		return func() error {
			v, err := getx(p, name, 1024)
			if err == nil && string(v) != want {
				t.Errorf("getxattr %s %s: %q, want %q", p, name, v, want)
			}
			return err
		}
	}
	fallocate := func(p string, mode uint32, off, n int64) error {
		f, err := os.OpenFile(at(p), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Fallocate(int(f.Fd()), mode, off, n)
	}
	sizeIs := func(p string, want int64) func() error {
		return func() error {
			fi, err := os.Stat(at(p))
			if err == nil && fi.Size() != want {
				t.Errorf("%s: size %d, want %d", p, fi.Size(), want)
			}
			return err
		}
	}
	big := bytes.Repeat([]byte("v"), fsmeta.MaxXattrValue)
	// A struct vfs_cap_data, revision 2, granting CAP_NET_BIND_SERVICE.
	vfsCapV2 := []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	cases := []struct {
		name string
		do   func() error
		want syscall.Errno
	}{
		// Special files: Sluice keeps type, mode and rdev.
		{"mkfifo", func() error { return unix.Mkfifo(at("fifo"), 0o640) }, 0},
		{"stat a fifo", statIs("fifo", unix.S_IFIFO, 0o640, 0), 0},
		{"mknod a character device", func() error { return unix.Mknod(at("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }, 0},
		{"stat a character device", statIs("null", unix.S_IFCHR, 0o666, uint32(unix.Mkdev(1, 3))), 0},
		{"mknod a block device", func() error { return unix.Mknod(at("sda1"), unix.S_IFBLK|0o660, int(unix.Mkdev(8, 1))) }, 0},
		{"stat a block device", statIs("sda1", unix.S_IFBLK, 0o660, uint32(unix.Mkdev(8, 1))), 0},
		{"mknod a socket file", func() error { return unix.Mknod(at("sock"), unix.S_IFSOCK|0o600, 0) }, 0},
		{"stat a socket file", statIs("sock", unix.S_IFSOCK, 0o600, 0), 0},
		{"mknod a regular file", func() error { return unix.Mknod(at("reg"), unix.S_IFREG|0o600, 0) }, 0},
		{"stat a file made by mknod", statIs("reg", unix.S_IFREG, 0o600, 0), 0},
		{"hard link to a fifo", func() error { return os.Link(at("fifo"), at("fifo2")) }, 0},
		{"rename a device node", func() error { return os.Rename(at("sda1"), at("d/sda1")) }, 0},
		{"chmod a fifo", func() error { return os.Chmod(at("fifo"), 0o600) }, 0},
		{"stat the chmodded fifo by its other name", statIs("fifo2", unix.S_IFIFO, 0o600, 0), 0},
		{"unlink a fifo's first name", func() error { return os.Remove(at("fifo")) }, 0},
		{"mkfifo over a name", func() error { return unix.Mkfifo(at("f"), 0o644) }, syscall.EEXIST},
		{"mknod over a name", func() error { return unix.Mknod(at("d"), unix.S_IFCHR|0o600, 0) }, syscall.EEXIST},
		{"mkfifo in a missing directory", func() error { return unix.Mkfifo(at("nope/fifo"), 0o644) }, syscall.ENOENT},
		{"mkfifo under a file", func() error { return unix.Mkfifo(at("f/fifo"), 0o644) }, syscall.ENOTDIR},
		{"mkfifo with a 256-byte name", func() error { return unix.Mkfifo(at(long), 0o644) }, syscall.ENAMETOOLONG},
		{"mknod of a directory", func() error { return unix.Mknod(at("dd"), unix.S_IFDIR|0o755, 0) }, syscall.EPERM},
		{"mknod of no known type", func() error { return unix.Mknod(at("x"), 0o170000|0o644, 0) }, syscall.EINVAL},
		{"truncate a fifo", func() error { return os.Truncate(at("fifo2"), 0) }, syscall.EINVAL},
		{"rmdir a fifo", func() error { return unix.Rmdir(at("fifo2")) }, syscall.ENOTDIR},
		{"open a directory's name as a fifo's", func() error { return unix.Mkfifo(at("d/"), 0o644) }, syscall.EEXIST},

		// Extended attributes.
		{"setxattr user.a", func() error { return unix.Setxattr(at("f"), "user.a", []byte("one"), 0) }, 0},
		{"getxattr user.a", wantX("f", "user.a", "one"), 0},
		{"getxattr's size", func() error {
			n, err := unix.Getxattr(at("f"), "user.a", nil)
			if err == nil && n != 3 {
				t.Errorf("size of user.a: %d, want 3", n)
			}
			return err
		}, 0},
		{"getxattr into a small buffer", func() error { _, err := getx("f", "user.a", 2); return err }, syscall.ERANGE},
		{"setxattr XATTR_CREATE over one", func() error { return unix.Setxattr(at("f"), "user.a", nil, unix.XATTR_CREATE) }, syscall.EEXIST},
		{"setxattr XATTR_REPLACE of a missing one", func() error { return unix.Setxattr(at("f"), "user.b", nil, unix.XATTR_REPLACE) }, syscall.ENODATA},
		{"setxattr XATTR_REPLACE", func() error { return unix.Setxattr(at("f"), "user.a", []byte("two"), unix.XATTR_REPLACE) }, 0},
		{"getxattr the replaced value", wantX("f", "user.a", "two"), 0},
		{"setxattr an empty value", func() error { return unix.Setxattr(at("f"), "user.empty", nil, unix.XATTR_CREATE) }, 0},
		{"getxattr an empty value", wantX("f", "user.empty", ""), 0},
		{"setxattr 64 KiB", func() error { return unix.Setxattr(at("f"), "user.big", big, 0) }, 0},
		{"setxattr 64 KiB + 1", func() error { return unix.Setxattr(at("f"), "user.big", append(big, 'x'), 0) }, syscall.E2BIG},
		{"setxattr a 256-byte name", func() error { return unix.Setxattr(at("f"), "user."+long[:251], nil, 0) }, syscall.ERANGE},
		{"setxattr an unknown namespace", func() error { return unix.Setxattr(at("f"), "os2.x", nil, 0) }, syscall.EOPNOTSUPP},
		{"getxattr an unknown namespace", func() error { _, err := getx("f", "os2.x", 16); return err }, syscall.EOPNOTSUPP},
		{"setxattr trusted.* as root", func() error { return unix.Setxattr(at("f"), "trusted.t", []byte("t"), 0) }, 0},
		{"setxattr security.* as root", func() error { return unix.Setxattr(at("f"), "security.s", []byte("s"), 0) }, 0},
		{"getxattr security.*", wantX("f", "security.s", "s"), 0},
		// The kernel reads security.capability before each write; the mount
		// remembers a file has none, and forgets it when one is set.
		{"a write (which reads security.capability)", func() error {
			f, err := os.OpenFile(at("f"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("file"), 0)
			return err
		}, 0},
		{"setxattr security.capability", func() error { return unix.Setxattr(at("f"), "security.capability", vfsCapV2, 0) }, 0},
		{"getxattr security.capability", func() error {
			v, err := getx("f", "security.capability", 64)
			if err == nil && !bytes.Equal(v, vfsCapV2) {
				t.Errorf("security.capability read back as %x, want %x", v, vfsCapV2)
			}
			return err
		}, 0},
		{"removexattr security.capability", func() error { return unix.Removexattr(at("f"), "security.capability") }, 0},
		{"listxattr", func() error {
			buf := make([]byte, 1024)
			n, err := unix.Listxattr(at("f"), buf)
			if err != nil {
				return err
			}
			names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
			if want := []string{"security.s", "trusted.t", "user.a", "user.big", "user.empty"}; !slices.Equal(names, want) {
				t.Errorf("listxattr: %q, want %q", names, want)
			}
			return nil
		}, 0},
		{"listxattr into a small buffer", func() error { _, err := unix.Listxattr(at("f"), make([]byte, 4)); return err }, syscall.ERANGE},
		{"removexattr", func() error { return unix.Removexattr(at("f"), "user.a") }, 0},
		{"getxattr a removed one", func() error { _, err := getx("f", "user.a", 16); return err }, syscall.ENODATA},
		{"removexattr a missing one", func() error { return unix.Removexattr(at("f"), "user.a") }, syscall.ENODATA},
		{"setxattr on a directory", func() error { return unix.Setxattr(at("d"), "user.d", []byte("dir"), 0) }, 0},
		{"getxattr on a directory", wantX("d", "user.d", "dir"), 0},
		{"setxattr user.* on a fifo", func() error { return unix.Setxattr(at("fifo2"), "user.x", nil, 0) }, syscall.EPERM},
		{"getxattr user.* on a fifo", func() error { _, err := getx("fifo2", "user.x", 16); return err }, syscall.ENODATA},
		{"lsetxattr user.* on a symlink", func() error { return unix.Lsetxattr(at("l"), "user.x", nil, 0) }, syscall.EPERM},
		{"setxattr trusted.* on a fifo", func() error { return unix.Setxattr(at("fifo2"), "trusted.x", []byte("x"), 0) }, 0},
		{"getxattr of a missing file", func() error { _, err := getx("nope", "user.a", 16); return err }, syscall.ENOENT},
		{"getxattr under a file", func() error { _, err := getx("f/x", "user.a", 16); return err }, syscall.ENOTDIR},

		// fallocate: the default mode and FALLOC_FL_KEEP_SIZE.
		{"fallocate extends", func() error { return fallocate("f", 0, 100, 1000) }, 0},
		{"size after fallocate", sizeIs("f", 1100), 0},
		{"fallocate within the length", func() error { return fallocate("f", 0, 0, 10) }, 0},
		{"fallocate KEEP_SIZE", func() error { return fallocate("f", unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20) }, 0},
		{"size after KEEP_SIZE", sizeIs("f", 1100), 0},
		{"fallocate PUNCH_HOLE without KEEP_SIZE", func() error { return fallocate("f", unix.FALLOC_FL_PUNCH_HOLE, 0, 10) }, syscall.EOPNOTSUPP},
		{"fallocate PUNCH_HOLE", func() error {
			// 200 KiB over four 64 KiB chunks; the hole takes the end of
			// chunk 0, chunk 1 whole and the start of chunk 2.
			if err := os.WriteFile(at("holey"), bytes.Repeat([]byte("a"), 200<<10), 0o644); err != nil {
				return err
			}
			if err := fallocate("holey", unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 10000, 150000); err != nil {
				return err
			}
			b, err := os.ReadFile(at("holey"))
			want := bytes.Repeat([]byte("a"), 200<<10)
			copy(want[10000:160000], make([]byte, 150000))
			if err == nil && !bytes.Equal(b, want) {
				t.Errorf("after punching [10000, 160000): %d bytes, zeros where? first diff at %d", len(b), firstDiff(b, want))
			}
			return err
		}, 0},
		{"fallocate PUNCH_HOLE past the end", func() error {
			return fallocate("holey", unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 190<<10, 1<<20)
		}, 0},
		{"size after PUNCH_HOLE", sizeIs("holey", 200<<10), 0},
		{"fallocate ZERO_RANGE", func() error { return fallocate("f", unix.FALLOC_FL_ZERO_RANGE, 0, 10) }, syscall.EOPNOTSUPP},
		{"fallocate of length 0", func() error { return fallocate("f", 0, 0, 0) }, syscall.EINVAL},
		{"fallocate past the largest file", func() error { return fallocate("f", 0, fsmeta.MaxFileSize, 1) }, syscall.EFBIG},
		{"fallocate on a directory", func() error { return fallocate("d", 0, 0, 1) }, syscall.EISDIR},
		{"the fallocated bytes read as zeros", func() error {
			b, err := os.ReadFile(at("f"))
			if err == nil && (string(b[:4]) != "file" || !bytes.Equal(b[4:], make([]byte, 1096))) {
				t.Errorf("after fallocate: %d bytes, %q...", len(b), b[:min(8, len(b))])
			}
			return err
		}, 0},

		// The root directory's times were set when the cluster was made.
		{"root mtime", func() error {
			fi, err := os.Stat(mt.dir)
			if err == nil && fi.ModTime().Before(time.Now().Add(-time.Hour)) {
				t.Errorf("root mtime %v", fi.ModTime())
			}
			return err
		}, 0},
	}
	for _, tc := range cases {
		if got := errnoOf(tc.do()); got != tc.want {
			t.Errorf("%s: errno %d (%v), want %d (%v)", tc.name, got, got, tc.want, tc.want)
		}
	}

	// The kernel gives special files their behaviour: a fifo carries bytes,
	// a unix socket bound in the mount is a socket file others connect to.
	t.Run("fifo", func(t *testing.T) {
		r, err := os.OpenFile(at("fifo2"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		must(t, err)
		defer r.Close()
		w, err := os.OpenFile(at("fifo2"), os.O_WRONLY, 0)
		must(t, err)
		defer w.Close()
		if _, err := w.Write([]byte("through the pipe")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		if err != nil || string(buf[:n]) != "through the pipe" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	})
	t.Run("bind", func(t *testing.T) {
		p := at("d/listener")
		ln, err := net.Listen("unix", p)
		must(t, err)
		defer ln.Close()
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Fatalf("bound socket: %v, %v", fi, err)
		}
		if fi, err := mt.cl.Stat(context.Background(), "/d/listener"); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Fatalf("the SDK sees the socket as %v, %v", fi, err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Write([]byte("hello"))
				c.Close()
			}
		}()
		c, err := net.Dial("unix", p)
		must(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 8)
		n, _ := c.Read(buf)
		if string(buf[:n]) != "hello" {
			t.Fatalf("read %q over the socket", buf[:n])
		}
		if _, err := net.Listen("unix", p); errnoOf(err) != syscall.EADDRINUSE {
			t.Fatalf("bind over a socket file: %v, want EADDRINUSE", err)
		}
	})
}

// helperCall is a child's one call (role "call", run as another user by
// TestConformanceAsUser): spec is op|path|arg; it prints the errno, 0 for
// success.
func helperCall(spec string) error {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		return fmt.Errorf("helper: %q is not op|path|arg", spec)
	}
	op, p, arg := parts[0], parts[1], parts[2]
	var err error
	switch op {
	case "mkfifo":
		err = unix.Mkfifo(p, 0o644)
	case "mknod-chr":
		err = unix.Mknod(p, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3)))
	case "setxattr":
		err = unix.Setxattr(p, arg, []byte("v"), 0)
	case "getxattr":
		_, err = unix.Getxattr(p, arg, make([]byte, 64))
	case "removexattr":
		err = unix.Removexattr(p, arg)
	default:
		return fmt.Errorf("helper: no op %q", op)
	}
	fmt.Println(int(errnoOf(err)))
	return nil
}

// TestConformanceAsUser: what an unprivileged user may do with special
// files and extended attributes on the mount, run in child processes as
// uid 65534.
func TestConformanceAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	mt := mount(t, 64<<10)
	must(t, os.Chmod(filepath.Dir(mt.dir), 0o755))
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.WriteFile(at("roots"), nil, 0o644))
	must(t, unix.Setxattr(at("roots"), "user.a", []byte("a"), 0))
	must(t, unix.Setxattr(at("roots"), "trusted.t", []byte("t"), 0))
	must(t, os.Mkdir(at("shared"), 0o777))
	must(t, os.Chmod(at("shared"), 0o777))
	must(t, os.WriteFile(at("shared/mine"), nil, 0o644))
	must(t, os.Chown(at("shared/mine"), 65534, 65534))
	must(t, unix.Setxattr(at("shared/mine"), "security.s", []byte("s"), 0))
	cases := []struct {
		name, op, path, arg string
		want                syscall.Errno
	}{
		{"mkfifo in a 0777 directory", "mkfifo", "shared/fifo", "", 0},
		{"mkfifo in root's 0755 directory", "mkfifo", "fifo", "", syscall.EACCES},
		{"mknod a device node", "mknod-chr", "shared/null", "", syscall.EPERM},
		{"setxattr user.* on an own file", "setxattr", "shared/mine", "user.x", 0},
		{"getxattr user.* on an own file", "getxattr", "shared/mine", "user.x", 0},
		{"setxattr user.* on root's 0644 file", "setxattr", "roots", "user.x", syscall.EACCES},
		{"getxattr user.* on root's 0644 file", "getxattr", "roots", "user.a", 0},
		{"setxattr trusted.*", "setxattr", "shared/mine", "trusted.x", syscall.EPERM},
		{"getxattr trusted.* (hidden)", "getxattr", "roots", "trusted.t", syscall.ENODATA},
		{"setxattr security.*", "setxattr", "shared/mine", "security.x", syscall.EPERM},
		{"removexattr security.*", "removexattr", "shared/mine", "security.s", syscall.EPERM},
	}
	// The test binary lies in a directory only root may enter: the child
	// runs a copy other users can.
	self, err := os.Executable()
	must(t, err)
	tmp, err := os.MkdirTemp("", "sluice-call")
	must(t, err)
	defer os.RemoveAll(tmp)
	must(t, os.Chmod(tmp, 0o755))
	bin := filepath.Join(tmp, "test.bin")
	b, err := os.ReadFile(self)
	must(t, err)
	must(t, os.WriteFile(bin, b, 0o755))
	for _, tc := range cases {
		cmd := testproc.Command("call", tc.op+"|"+at(tc.path)+"|"+tc.arg)
		cmd.Path, cmd.Args[0] = bin, bin
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		got, perr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil {
			t.Errorf("%s: the child: %v, %q", tc.name, err, out)
			continue
		}
		if syscall.Errno(got) != tc.want {
			t.Errorf("%s: errno %d (%v), want %d (%v)", tc.name, got, syscall.Errno(got), tc.want, tc.want)
		}
	}
	var st unix.Stat_t
	must(t, unix.Stat(at("shared/fifo"), &st))
	if st.Uid != 65534 || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Fatalf("a fifo made by uid 65534: owner %d, mode %#o", st.Uid, st.Mode)
	}
}

// TestTmpfile: open(2) with O_TMPFILE makes a file with no name that can
// be written and read; linkat(2) gives it one, keeping what was written;
// one never linked leaves no name and is collected once closed.
func TestTmpfile(t *testing.T) {
	mt := mount(t, 64<<10)
	at := func(p string) string { return filepath.Join(mt.dir, p) }
	must(t, os.Mkdir(at("d"), 0o755))
	fd, err := unix.Open(at("d"), unix.O_TMPFILE|unix.O_RDWR, 0o640)
	must(t, err)
	f := os.NewFile(uintptr(fd), "tmpfile")
	defer f.Close()
	if _, err := f.Write([]byte("no name yet")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	must(t, unix.Fstat(fd, &st))
	if st.Nlink != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("an O_TMPFILE file: nlink %d, mode %#o", st.Nlink, st.Mode)
	}
	if names, err := os.ReadDir(at("d")); err != nil || len(names) != 0 {
		t.Fatalf("the directory lists %v, %v", names, err)
	}
	must(t, unix.Linkat(fd, "", unix.AT_FDCWD, at("d/named"), unix.AT_EMPTY_PATH))
	must(t, f.Close())
	if b, err := os.ReadFile(at("d/named")); err != nil || string(b) != "no name yet" {
		t.Fatalf("the linked file reads %q, %v", b, err)
	}
	if fi, err := mt.cl.Stat(context.Background(), "/d/named"); err != nil || fi.Nlink() != 1 {
		t.Fatalf("the SDK sees %v, %v", fi, err)
	}

	// One never linked: nothing in the directory, and the collector takes
	// it (and only it: the linked one stays) once it is closed.
	fd2, err := unix.Open(at("d"), unix.O_TMPFILE|unix.O_WRONLY, 0o600)
	must(t, err)
	if _, err := unix.Write(fd2, []byte("gone")); err != nil {
		t.Fatal(err)
	}
	must(t, unix.Fstat(fd2, &st))
	must(t, unix.Close(fd2))
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := mt.c.Collect(ctx, time.Now().Add(time.Hour+fsmeta.ReadLease))
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unlinked O_TMPFILE file was not collected: %d, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := mt.cl.StatAt(ctx, st.Ino, ""); !errors.Is(err, sdk.ErrNotExist) {
		t.Fatalf("the collected file's inode %d: %v", st.Ino, err)
	}
	if b, err := os.ReadFile(at("d/named")); err != nil || string(b) != "no name yet" {
		t.Fatalf("the linked file after collection reads %q, %v", b, err)
	}
}

// firstDiff is the first index where a and b differ, or the shorter length.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestCapabilityRemembered: the kernel reads security.capability before
// every write; after the first, the mount answers from memory, and for a
// file it has just made, from the first.
func TestCapabilityRemembered(t *testing.T) {
	mt := mount(t, 64<<10)
	f, err := os.Create(filepath.Join(mt.dir, "w"))
	must(t, err)
	defer f.Close()
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := mt.m.FS.Stats().CapsRemembered.Load(); n != 1 {
		t.Fatalf("the first write to a new file: %d capability checks answered from memory, want 1", n)
	}
	for i := range 64 {
		if _, err := f.WriteAt(make([]byte, 4096), int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if n := mt.m.FS.Stats().CapsRemembered.Load(); n < 32 {
		t.Fatalf("%d of 64 writes' capability checks answered from memory", n)
	}
}
