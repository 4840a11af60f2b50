package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerCollectDelay: a meta replica's collect_delay that is not a
// positive duration is refused, naming the key, before anything starts.
func TestServerCollectDelay(t *testing.T) {
	for _, bad := range []string{"soon", "-1m", "0s"} {
		dir := t.TempDir()
		config := filepath.Join(dir, "meta.json")
		body := `{"dir": "` + dir + `", "meta": {"listen": "127.0.0.1:0", "raft_bind": "127.0.0.1:0", "collect_delay": "` + bad + `"}}`
		if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "server", "--role", "meta", "--config", config)
		if err == nil || !strings.Contains(err.Error(), "meta.collect_delay") {
			t.Errorf("collect_delay %q: %v", bad, err)
		}
	}
}
