package auth

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TokenAuth returns gRPC interceptors that refuse calls without the cluster
// token ("authorization: Bearer <token>" metadata; the REST gateway passes
// the HTTP Authorization header through).
func TokenAuth(token string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context) error {
		if token == "" {
			return status.Error(codes.Unauthenticated, "the server has no cluster token")
		}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if Bearer(token, v) {
				return nil
			}
		}
		return status.Error(codes.Unauthenticated, "missing or wrong cluster token")
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := check(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := check(ss.Context()); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}

// Bearer reports whether an authorization value ("Bearer <token>", as a
// gRPC call's metadata or an HTTP Authorization header carries it) holds
// token. An empty token matches nothing.
func Bearer(token, authorization string) bool {
	got, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// Credentials makes a connection send the cluster token with every call
// (per-RPC credentials: "authorization: Bearer <token>"), so no context
// has to carry it. The token goes in the clear on a plaintext connection,
// as the cluster's other traffic does; with TLS it is encrypted.
func Credentials(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer(token))
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
