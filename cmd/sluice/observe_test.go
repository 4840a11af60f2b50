package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestLogFlags: --log-format json writes one JSON object a line, at
// --log-level and above; text writes slog's text; bad values are refused
// before the command runs.
func TestLogFlags(t *testing.T) {
	var b bytes.Buffer
	l, err := (&logFlags{level: "warn", format: "json"}).logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("chatter")
	l.Warn("disk slow", "target", 3)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %v: %s", err, b.String())
	}
	if rec["level"] != "WARN" || rec["msg"] != "disk slow" || rec["target"] != 3.0 {
		t.Errorf("record %v", rec)
	}
	b.Reset()
	if l, err = (&logFlags{level: "debug", format: "text"}).logger(&b); err != nil {
		t.Fatal(err)
	}
	l.Debug("x", "k", "v")
	if !strings.Contains(b.String(), "level=DEBUG msg=x k=v") {
		t.Errorf("text record %q", b.String())
	}
	for _, args := range [][]string{{"--log-format", "xml", "version"}, {"--log-level", "loud", "version"}} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("sluice %v ran", args)
		}
	}
}
