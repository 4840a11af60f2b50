package fabric

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Handle registers a typed handler for method on ep: the request body is
// unmarshaled into a new Req, and a body that does not parse is refused with
// ErrBadRequest before fn runs.
func Handle[Req, Resp proto.Message](ep Endpoint, method string, fn func(ctx context.Context, peer NodeID, req Req) (Resp, error)) {
	var zero Req
	typ := zero.ProtoReflect().Type()
	ep.Handle(method, func(ctx context.Context, peer NodeID, body []byte) (proto.Message, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadRequest, method, err)
		}
		resp, err := fn(ctx, peer, req)
		if err != nil {
			return nil, err
		}
		return resp, nil
	})
}

// MessageHandler is a method's handler for a caller in the same process:
// it takes the caller's own request message, of type Req, instead of its
// bytes. A transport that keeps calls in one process (fabric/local) uses
// it, when a method has one, to skip marshaling the request and the reply,
// which on batched reads of small ranges cost as much as serving them.
// Serve must neither change nor keep req (the caller still owns it), and
// hands the reply over to the caller.
type MessageHandler struct {
	Req   protoreflect.MessageDescriptor
	Serve func(ctx context.Context, peer NodeID, req proto.Message) (proto.Message, error)
}

// messageHandling is an endpoint that keeps in-process handlers: those
// embedding Handlers, and fabric/local's attached endpoints.
type messageHandling interface {
	HandleMessage(method string, h MessageHandler)
}

// HandleReadOnly is Handle for a handler that neither changes nor keeps
// its request: in-process callers (fabric/local) hand it their request
// message as it is, and take its reply as it is, with nothing marshaled.
func HandleReadOnly[Req, Resp proto.Message](ep Endpoint, method string, fn func(ctx context.Context, peer NodeID, req Req) (Resp, error)) {
	Handle(ep, method, fn)
	t, ok := ep.(messageHandling)
	if !ok {
		return
	}
	var zero Req
	t.HandleMessage(method, MessageHandler{Req: zero.ProtoReflect().Descriptor(), Serve: func(ctx context.Context, peer NodeID, req proto.Message) (proto.Message, error) {
		resp, err := fn(ctx, peer, req.(Req))
		if err != nil {
			return nil, err
		}
		return resp, nil
	}})
}
