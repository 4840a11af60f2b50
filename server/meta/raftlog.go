package meta

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the hclog.Logger hashicorp/raft logs through: its warnings
// and errors reach log, at the matching slog level, with raft's key-value
// pairs as attributes; its informational and debug chatter (every
// heartbeat, every snapshot step) is dropped.
func raftLogger(log *slog.Logger) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Output: io.Discard, Level: hclog.Warn})
	l.RegisterSink(raftSink{log})
	return l
}

// raftSink forwards what the intercept logger accepts to slog.
type raftSink struct{ log *slog.Logger }

func (s raftSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	var lvl slog.Level
	switch {
	case level >= hclog.Error:
		lvl = slog.LevelError
	case level == hclog.Warn:
		lvl = slog.LevelWarn
	default:
		return
	}
	attrs := make([]any, 0, len(args)+2)
	attrs = append(attrs, "component", name)
	for i := 0; i+1 < len(args); i += 2 {
		attrs = append(attrs, fmt.Sprint(args[i]), args[i+1])
	}
	s.log.Log(context.Background(), lvl, msg, attrs...)
}
