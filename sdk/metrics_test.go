package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicefs/sluice/chunkio"
)

// TestErrorKinds: errors sort into the fixed kinds, wrapped or not, and the
// snapshot names each kind's counter with its label.
func TestErrorKinds(t *testing.T) {
	m := newMetrics()
	for _, c := range []struct {
		err  error
		kind string
	}{
		{fmt.Errorf("read /x: %w", ErrTimeout), "timeout"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("read: %w", context.Canceled), "canceled"},
		{fmt.Errorf("chain 3: %w", chunkio.ErrUnavailable), "unavailable"},
		{chunkio.ErrChecksum, "checksum"},
		{fmt.Errorf("write: %w", chunkio.ErrNoSpace), "no_space"},
		{chunkio.ErrNotFound, "not_found"},
		{errors.New("something else"), "other"},
	} {
		if got := errorKind(c.err); got != c.kind {
			t.Errorf("errorKind(%v) = %s, want %s", c.err, got, c.kind)
		}
		m.read(0, c.err)
	}
	m.read(100, nil)
	m.wrote(7, nil)
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		`sluice_client_errors_total{kind="timeout"}`: 2, `sluice_client_errors_total{kind="other"}`: 1,
		"sluice_client_read_bytes_total": 100, "sluice_client_reads_total": 1, "sluice_client_write_bytes_total": 7,
		"sluice_loader_stall_seconds_total": 0,
	} {
		if got, ok := snap[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}
