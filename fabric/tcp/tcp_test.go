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

func pair(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
	return pairWith(t, Config{})
}

func pairWith(t *testing.T, cfg Config) (fabric.Endpoint, fabric.Endpoint) {
	tr := newTransport(t, cfg)
	srv, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := tr.Dialer("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

func TestContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	fabrictest.Run(t, pair)
}

// TestContractNoDataChecksum: the same contract with payload checksums off.
func TestContractNoDataChecksum(t *testing.T) {
	fabrictest.Run(t, func(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
		return pairWith(t, Config{NoDataChecksum: true})
	})
}
