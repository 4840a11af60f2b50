package verbs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDeviceNUMANode(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "class", "infiniband", "mlx5_0", "device")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "numa_node"), []byte("1\n"), 0o644)
	if n := deviceNUMANode(root, "mlx5_0"); n != 1 {
		t.Fatalf("node %d, want 1", n)
	}
	os.WriteFile(filepath.Join(dir, "numa_node"), []byte("-1\n"), 0o644)
	if n := deviceNUMANode(root, "mlx5_0"); n != -1 {
		t.Fatalf("node %d for a device without affinity, want -1", n)
	}
	if n := deviceNUMANode(root, "nope"); n != -1 {
		t.Fatalf("node %d for a missing device, want -1", n)
	}
}

func TestAllocMemory(t *testing.T) {
	b, err := AllocMemory(1<<20, -1)
	if err != nil {
		t.Fatal(err)
	}
	b[0], b[len(b)-1] = 1, 2
	if err := FreeMemory(b); err != nil {
		t.Fatal(err)
	}
	// Node 0 exists on every Linux machine; binding to it must work or say
	// clearly why not (a kernel without NUMA support).
	b, err = AllocMemory(1<<20, 0)
	if err != nil {
		t.Logf("binding to node 0 refused: %v", err)
	} else {
		b[0] = 1
		FreeMemory(b)
	}
	if _, err := AllocMemory(0, -1); err == nil {
		t.Fatal("zero-byte allocation accepted")
	}
	if _, err := AllocMemory(4096, 99); err == nil {
		t.Fatal("node 99 accepted")
	}
}
