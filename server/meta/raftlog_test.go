package meta

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestRaftLogger: Raft's warnings and errors reach the slog logger with
// their attributes and the logger's name; its informational and debug
// messages do not.
func TestRaftLogger(t *testing.T) {
	var out bytes.Buffer
	l := raftLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Info("entering follower state", "term", 3)
	l.Debug("heartbeat")
	l.Named("transport").Warn("failed to contact", "server-id", "m2")
	l.Error("failed to heartbeat", "peer", "m3")
	got := out.String()
	for _, want := range []string{`level=WARN msg="failed to contact" component=raft.transport server-id=m2`, `level=ERROR msg="failed to heartbeat" component=raft peer=m3`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "follower") || strings.Contains(got, "heartbeat\n") {
		t.Errorf("informational chatter logged:\n%s", got)
	}
}
