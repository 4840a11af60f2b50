package local

import (
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

func pair(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
	n := NewNetwork()
	srv, err := n.Listen("server")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := n.Dialer("client")
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

func TestNameInUse(t *testing.T) {
	n := NewNetwork()
	a, err := n.Listen("a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := n.Listen("a"); err == nil {
		t.Fatal("two endpoints with one name")
	}
}
