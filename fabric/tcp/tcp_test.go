package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

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

// TestPushAheadOfReply: a handler's push into its caller's memory rides
// ahead of the reply, unacknowledged; the bytes are there when the call
// returns, and a push the caller cannot store fails the call.
func TestPushAheadOfReply(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	tr := newTransport(t, Config{})
	srv, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := tr.Dialer("client")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	buf := make([]byte, 64<<10)
	mr, err := cli.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := fabrictest.RandBytes(3, len(buf))
	fabric.Handle(srv, "push", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.UInt64Value) (*wrapperspb.UInt64Value, error) {
		rb := mr.Remote(0, len(buf))
		rb.Key ^= req.Value // a non-zero value spoils the key
		if err := srv.Write(ctx, data, rb); err != nil {
			return nil, err
		}
		return req, nil
	})
	ctx := context.Background()
	var out wrapperspb.UInt64Value
	if err := cli.Call(ctx, srv.ID(), "push", wrapperspb.UInt64(0), &out); err != nil {
		t.Fatal(err)
	}
	mr.Fence()
	if !bytes.Equal(buf, data) {
		t.Fatal("the pushed bytes are not in the caller's buffer when the call returns")
	}
	err = cli.Call(ctx, srv.ID(), "push", wrapperspb.UInt64(1<<40), &out)
	if !errors.Is(err, fabric.ErrUnknownKey) {
		t.Fatalf("call whose push the caller refused: %v, want ErrUnknownKey", err)
	}
	// The connection is still good.
	if err := cli.Call(ctx, srv.ID(), "push", wrapperspb.UInt64(0), &out); err != nil {
		t.Fatal(err)
	}
}
