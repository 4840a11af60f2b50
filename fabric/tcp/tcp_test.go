package tcp

import (
	"io"
	"log/slog"
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

var testSecret = []byte("test cluster secret")

// quiet swallows the logs of refused peers and panicking handlers, which
// these tests provoke on purpose.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTransport(t testing.TB, cfg Config) *Transport {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// pairWith makes contract-suite pairs over TCP loopback with cfg.
func pairWith(cfg Config) fabrictest.Pair {
	return fabrictest.PairOn(func(t *testing.T) fabric.Transport { return newTransport(t, cfg) }, "127.0.0.1:0")
}

func TestContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	fabrictest.Run(t, pairWith(Config{}))
}

// TestContractDataChecksum: the same contract with payload checksums on.
func TestContractDataChecksum(t *testing.T) {
	fabrictest.Run(t, pairWith(Config{DataChecksum: true}))
}
