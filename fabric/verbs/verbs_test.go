//go:build verbs

package verbs

import (
	"errors"
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// TestContract runs the fabric contract suite over RDMA when this machine
// has a device, and says plainly that it did not run otherwise.
func TestContract(t *testing.T) {
	tr, err := New(Config{Secret: []byte("verbs test secret")})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := tr.Listen("127.0.0.1:0")
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("contract suite not run: %v (no RDMA device on this machine)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	probe.Close()
	fabrictest.Run(t, fabrictest.PairOn(func(*testing.T) fabric.Transport { return tr }, "127.0.0.1:0"))
}

// TestNoDevice: without a device, endpoints fail with ErrNoDevice and a
// message naming what is missing, not a crash.
func TestNoDevice(t *testing.T) {
	tr, err := New(Config{Secret: []byte("s"), Device: "no-such-device"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Dialer("x")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("endpoint on a missing device: %v, want ErrNoDevice", err)
	}
}

func TestConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("transport without a secret")
	}
	if _, err := New(Config{Secret: []byte("s"), MsgSize: 10}); err == nil {
		t.Fatal("message size below the minimum accepted")
	}
	if _, err := New(Config{Secret: []byte("s"), CreditsPerPeer: 100, RecvBuffers: 10}); err == nil {
		t.Fatal("more credits per peer than receive buffers accepted")
	}
}
