package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// deviceNUMANode returns the NUMA node of an RDMA device's PCI function as
// sysfs reports it (root is normally "/sys"), or -1 when it reports none.
func deviceNUMANode(root, device string) int {
	b, err := os.ReadFile(filepath.Join(root, "class", "infiniband", device, "device", "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

const mpolBind = 2 // MPOL_BIND from linux/mempolicy.h

// AllocMemory maps n bytes of anonymous memory for registration, bound to
// NUMA node node when node >= 0 (pass the NIC's node so that the NIC's DMA
// stays local). Memory that the NIC reads and writes must come from here (or
// from C), never from the Go heap. Free it with FreeMemory.
func AllocMemory(n int, node int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: allocate %d bytes", n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", n, err)
	}
	if node >= 0 {
		if node >= 64 {
			syscall.Munmap(b)
			return nil, fmt.Errorf("verbs: NUMA node %d out of range", node)
		}
		mask := uint64(1) << node
		_, _, errno := syscall.Syscall6(syscall.SYS_MBIND, uintptr(unsafe.Pointer(&b[0])), uintptr(n), mpolBind,
			uintptr(unsafe.Pointer(&mask)), 64, 0)
		if errno != 0 {
			syscall.Munmap(b)
			return nil, fmt.Errorf("verbs: bind %d bytes to NUMA node %d: %w", n, node, errno)
		}
	}
	return b, nil
}

// FreeMemory unmaps memory from AllocMemory.
func FreeMemory(b []byte) error {
	return syscall.Munmap(b)
}
