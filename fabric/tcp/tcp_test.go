package tcp

import (
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

var testSecret = []byte("test cluster secret")

func newTransport(t testing.TB, cfg Config) *Transport {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func pair(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
	tr := newTransport(t, Config{})
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
