package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicefs/sluice/"

// deps lists the packages pkg depends on, by `go list -deps`.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestLayers(t *testing.T) {
	rules := []struct {
		pkgs   []string
		banned []string // import path prefixes
		why    string
	}{
		{[]string{"fabric", "fabric/tcp", "fabric/local", "fabric/faulty", "shmring"},
			[]string{module + "server", module + "sdk", module + "dataset", module + "chunkio", module + "routing", module + "fsmeta", module + "proto"},
			"the transport and the rings sit below everything else"},
		{[]string{"sdk", "sdk/fuse", "dataset", "arrowflight", "cmd/libsluice", "chunkio", "routing", "fsmeta", "auth", "rpc", "errcode"},
			[]string{"github.com/hashicorp/raft", "github.com/cockroachdb/pebble", module + "server/"},
			"the client side links no server: no Raft, no Pebble"},
		{[]string{"server/mgmtd"}, []string{module + "server/storage", module + "server/chunkstore"}, "mgmtd knows targets through routing, not the storage servers"},
	}
	for _, r := range rules {
		for _, p := range r.pkgs {
			for _, d := range deps(t, p) {
				for _, b := range r.banned {
					if strings.HasPrefix(d, b) && d != module+p {
						t.Errorf("%s depends on %s: %s", p, d, r.why)
					}
				}
			}
		}
	}
}
