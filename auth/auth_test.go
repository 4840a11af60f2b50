package auth_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/rpc"
	"github.com/sluicefs/sluice/rpc/rpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestTLSAndToken: a TLS server with the token check answers a client that
// trusts its certificate and brings the token; plaintext and tokenless
// clients are refused.
func TestTLSAndToken(t *testing.T) {
	certFile, keyFile := rpctest.SelfSigned(t)
	creds, err := rpc.ServerTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	unary, stream := auth.TokenAuth("secret-token")
	gs := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ccreds, err := rpc.ClientTLS(certFile, "sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	check := func(opts ...grpc.DialOption) error {
		conn, err := grpc.NewClient(ln.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(grpc.WithTransportCredentials(ccreds), auth.Credentials("secret-token")); err != nil {
		t.Fatalf("TLS call with the token: %v", err)
	}
	if err := check(grpc.WithTransportCredentials(ccreds)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("TLS call without the token: %v", err)
	}
	if err := check(grpc.WithTransportCredentials(ccreds), auth.Credentials("wrong")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("TLS call with a wrong token: %v", err)
	}
	if err := check(grpc.WithTransportCredentials(insecure.NewCredentials()), auth.Credentials("secret-token")); err == nil {
		t.Fatal("plaintext call to a TLS server succeeded")
	}
	if _, err := rpc.ClientTLS(keyFile, "x"); err == nil {
		t.Fatal("a key file was accepted as a CA")
	}
	if _, err := rpc.ServerTLS(certFile, certFile); err == nil {
		t.Fatal("a certificate was accepted as a key")
	}
}
