package local

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicefs/sluice/fabric"
)

// TestReadOnlyHandlerTakesTheMessage: a method registered with
// HandleReadOnly gets an in-process caller's request message itself (no
// bytes in between), its reply reaches the caller's response whole, and
// errors, panics and a response of another type behave as over the wire;
// on the attached endpoint a TCP server shares with the process too. A
// plain Handle for the same method, registered later, takes over.
func TestReadOnlyHandlerTakesTheMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := NewNetwork()
	plain, err := n.Listen("plain")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, srv := range []fabric.Endpoint{plain, attachedServer(t, n, tcpTransport(t))} {
		t.Run(string(srv.ID()), func(t *testing.T) {
			cli, _ := n.Dialer("client-of-" + string(srv.ID()))
			defer cli.Close()
			var seen *structpb.ListValue
			fabric.HandleReadOnly(srv, "sum", func(ctx context.Context, peer fabric.NodeID, req *structpb.ListValue) (*structpb.ListValue, error) {
				seen = req
				if len(req.Values) == 0 {
					return nil, fabric.NewError(fabric.CodeBadRequest, "nothing to sum")
				}
				if req.Values[0].GetStringValue() == "panic" {
					panic("asked to")
				}
				sum := 0.0
				for _, v := range req.Values {
					sum += v.GetNumberValue()
				}
				return &structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(sum), structpb.NewStringValue(string(peer))}}, nil
			})
			req := &structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(2), structpb.NewNumberValue(40)}}
			resp := &structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("stale")}}
			if err := cli.Call(ctx, srv.ID(), "sum", req, resp); err != nil {
				t.Fatal(err)
			}
			if seen != req {
				t.Fatal("the handler got a copy of the request, not the caller's message")
			}
			if len(resp.Values) != 2 || resp.Values[0].GetNumberValue() != 42 || resp.Values[1].GetStringValue() != string(cli.ID()) {
				t.Fatalf("reply %v", resp)
			}

			// Another response type: through the wire form, as over TCP.
			var other, want structpb.Struct
			body, _ := proto.Marshal(resp)
			if err := proto.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			if err := cli.Call(ctx, srv.ID(), "sum", req, &other); err != nil || !proto.Equal(&other, &want) {
				t.Fatalf("reply into another type: %v (want %v), %v", &other, &want, err)
			}

			err := cli.Call(ctx, srv.ID(), "sum", &structpb.ListValue{}, resp)
			if fabric.CodeOf(err) != fabric.CodeBadRequest {
				t.Fatalf("handler's error: %v (code %d)", err, fabric.CodeOf(err))
			}
			err = cli.Call(ctx, srv.ID(), "sum", &structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("panic")}}, resp)
			if fabric.CodeOf(err) != fabric.CodeInternal {
				t.Fatalf("handler's panic: %v", err)
			}

			// A request of another type than the handler's goes as bytes.
			seen = nil
			if err := cli.Call(ctx, srv.ID(), "sum", wrapperspb.String("x"), resp); err == nil && seen == req {
				t.Fatal("a request of another type reached the handler as a message")
			}

			fabric.Handle(srv, "sum", func(ctx context.Context, peer fabric.NodeID, req *structpb.ListValue) (*structpb.ListValue, error) {
				seen = req
				return proto.Clone(req).(*structpb.ListValue), nil
			})
			if err := cli.Call(ctx, srv.ID(), "sum", req, resp); err != nil {
				t.Fatal(err)
			}
			if seen == req || len(resp.Values) != 2 || resp.Values[1].GetNumberValue() != 40 {
				t.Fatalf("after Handle: handler saw the caller's message %v, reply %v", seen == req, resp)
			}
		})
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestMessageHandlerRunsOnTheCaller: an in-process caller runs a message
// handler on its own goroutine (no hand-off to a worker and back), under
// the call's deadline; the handler counts as the peer's: closing the peer
// ends the handler's context and waits for it, and a closed peer refuses.
func TestMessageHandlerRunsOnTheCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := NewNetwork()
	srv, err := n.Listen("srv")
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := n.Dialer("cli")
	defer cli.Close()
	var onCaller bool
	var deadline time.Time
	started := make(chan struct{})
	var ended atomic.Bool
	fabric.HandleReadOnly(srv, "m", func(hctx context.Context, peer fabric.NodeID, req *structpb.ListValue) (*structpb.ListValue, error) {
		if len(req.Values) == 0 { // block until the peer closes
			close(started)
			<-hctx.Done()
			time.Sleep(50 * time.Millisecond) // Close must wait for this too
			ended.Store(true)
			return nil, hctx.Err()
		}
		onCaller = strings.Contains(string(debug.Stack()), "TestMessageHandlerRunsOnTheCaller")
		deadline, _ = hctx.Deadline()
		return req, nil
	})
	req := &structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1)}}
	if err := cli.Call(ctx, srv.ID(), "m", req, &structpb.ListValue{}); err != nil {
		t.Fatal(err)
	}
	if want, _ := ctx.Deadline(); !onCaller || !deadline.Equal(want) {
		t.Fatalf("handler on the caller's goroutine: %v; its deadline %v, the call's %v", onCaller, deadline, want)
	}

	callErr := make(chan error, 1)
	go func() { callErr <- cli.Call(ctx, srv.ID(), "m", &structpb.ListValue{}, &structpb.ListValue{}) }()
	<-started
	srv.Close()
	if !ended.Load() {
		t.Fatal("Close returned before the handler it ran ended")
	}
	if err := <-callErr; err == nil {
		t.Fatal("the call whose peer closed succeeded")
	}
	if err := cli.Call(ctx, srv.ID(), "m", req, &structpb.ListValue{}); err == nil {
		t.Fatal("a call to a closed peer succeeded")
	}
}
