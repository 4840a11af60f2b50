package fabric

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
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
