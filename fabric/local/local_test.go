package local

import (
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

func TestContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	fabrictest.Run(t, fabrictest.PairOn(func(*testing.T) fabric.Transport { return NewNetwork() }, "server"))
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
