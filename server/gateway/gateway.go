package gateway

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Registrar registers one service's REST handlers on a gateway mux,
// forwarding to a gRPC endpoint: the generated RegisterXHandlerFromEndpoint.
type Registrar func(ctx context.Context, mux *runtime.ServeMux, endpoint string, opts []grpc.DialOption) error

// Gateway returns an HTTP handler serving the services' REST/JSON APIs by
// forwarding to the gRPC server at grpcAddr (normally this process, on
// loopback), so every call passes the same interceptors; the HTTP
// Authorization header travels as the call's metadata. dial defaults to
// plaintext.
func Gateway(ctx context.Context, grpcAddr string, dial []grpc.DialOption, services ...Registrar) (http.Handler, error) {
	mux := runtime.NewServeMux()
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	for _, register := range services {
		if err := register(ctx, mux, grpcAddr, dial); err != nil {
			return nil, err
		}
	}
	return mux, nil
}
