package local

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/internal/crc32c"
)

func tcpTransport(t *testing.T) *tcp.Transport {
	tr, err := tcp.New(tcp.Config{Secret: []byte("attach test")})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// attachedServer listens on TCP and attaches the endpoint to n.
func attachedServer(t *testing.T, n *Network, tr *tcp.Transport) fabric.Endpoint {
	far, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := n.Attach(far.(Shareable))
	if err != nil {
		far.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestAttachedContract runs the contract against an attached server from a
// client in the process (memory copies) and from one outside it (TCP).
func TestAttachedContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	t.Run("near", func(t *testing.T) {
		fabrictest.Run(t, func(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
			n := NewNetwork()
			srv := attachedServer(t, n, tcpTransport(t))
			cli, _ := n.Dialer("client")
			t.Cleanup(func() { cli.Close() })
			return srv, cli
		})
	})
	t.Run("far", func(t *testing.T) {
		fabrictest.Run(t, func(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
			tr := tcpTransport(t)
			srv := attachedServer(t, NewNetwork(), tr)
			cli, err := tr.Dialer("client")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			return srv, cli
		})
	})
}

// TestAttachedServesBothSides: one key of an attached endpoint is read by
// a peer in the process and one outside it, and the attached endpoint
// pushes into both in one batch, each by its own path.
func TestAttachedServesBothSides(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, tr := NewNetwork(), tcpTransport(t)
	srv := attachedServer(t, n, tr)
	near, _ := n.Dialer("near")
	defer near.Close()
	far, err := tr.Dialer("far")
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	if !n.reaches(srv.ID()) || n.reaches(far.ID()) {
		t.Fatalf("network membership: server %v, far client %v", n.reaches(srv.ID()), n.reaches(far.ID()))
	}

	src := fabrictest.RandBytes(1, 4096)
	mr, err := srv.RegisterMemory(src, fabric.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for _, cli := range []fabric.Endpoint{near, far} {
		got := make([]byte, len(src))
		if err := cli.Read(ctx, mr.Remote(0, len(src)), got); err != nil {
			t.Fatalf("%s reads the attached key: %v", cli.ID(), err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("%s read other bytes", cli.ID())
		}
	}

	nearDst, farDst := make([]byte, 4096), make([]byte, 4096)
	nmr, _ := near.RegisterMemory(nearDst, fabric.AccessRemoteWrite)
	fmr, _ := far.RegisterMemory(farDst, fabric.AccessRemoteWrite)
	// The far client opens the connection the server pushes back over.
	if err := far.Read(ctx, mr.Remote(0, 1), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := srv.WriteBatch(ctx, []fabric.Op{{Remote: nmr.Remote(0, 2048), Local: src[:2048]}, {Remote: fmr.Remote(0, 2048), Local: src[2048:]}}); err != nil {
		t.Fatalf("push to both sides: %v", err)
	}
	nmr.Fence()
	fmr.Fence()
	if !bytes.Equal(nearDst[:2048], src[:2048]) || !bytes.Equal(farDst[:2048], src[2048:]) {
		t.Fatal("a push landed wrong")
	}
	// Summed pushes: into the process, summed as copied; with a peer
	// over the wire in the batch, pushed all the same but not summed.
	se := srv.(fabric.SummingEndpoint)
	sums, err := se.WriteBatchSummed(ctx, []fabric.Op{{Remote: nmr.Remote(2048, 2048), Local: src[2048:]}})
	nmr.Fence()
	if err != nil || len(sums) != 1 || sums[0] != crc32c.Checksum(src[2048:]) || !bytes.Equal(nearDst[2048:], src[2048:]) {
		t.Fatalf("summed push into the process: sums %v, %v", sums, err)
	}
	sums, err = se.WriteBatchSummed(ctx, []fabric.Op{{Remote: nmr.Remote(0, 1024), Local: src[1024:2048]}, {Remote: fmr.Remote(2048, 1024), Local: src[:1024]}})
	nmr.Fence()
	fmr.Fence()
	if err != nil || sums != nil || !bytes.Equal(nearDst[:1024], src[1024:2048]) || !bytes.Equal(farDst[2048:3072], src[:1024]) {
		t.Fatalf("summed push with a peer over TCP: sums %v, %v", sums, err)
	}

	// Closing takes the endpoint off the network; TCP peers lose it too.
	srv.Close()
	if n.reaches(srv.ID()) {
		t.Fatal("closed endpoint still on the network")
	}
	if err := near.Read(ctx, mr.Remote(0, 16), make([]byte, 16)); err == nil {
		t.Fatal("read from a closed attached endpoint")
	}
}

func TestAttachNameInUse(t *testing.T) {
	n, tr := NewNetwork(), tcpTransport(t)
	srv := attachedServer(t, n, tr)
	far, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	if _, err := n.Listen(string(srv.ID())); err == nil {
		t.Fatal("a local endpoint took an attached endpoint's name")
	}
	other, _ := n.Dialer("other")
	defer other.Close()
	if _, err := n.Attach(fakeName{far.(Shareable), other.ID()}); err == nil {
		t.Fatal("attached under a name in use")
	}
}

// fakeName is a TCP endpoint that claims another ID.
type fakeName struct {
	Shareable
	id fabric.NodeID
}

func (f fakeName) ID() fabric.NodeID { return f.id }
