package arrowflight

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/sdk"
)

// Config says what a Server serves and within which limits.
type Config struct {
	Client *sdk.Client // the cluster the datasets are read from and written to
	Token  string      // the cluster token every call must carry (required)
	// TLS, when set, is the server's transport security (rpc.ServerTLS);
	// plaintext otherwise.
	TLS credentials.TransportCredentials
	// MaxStreams bounds DoGet and DoPut streams open at once (default 8);
	// one more is refused with RESOURCE_EXHAUSTED.
	MaxStreams int
	// StreamMemory is each DoGet stream's loader budget in bytes (default
	// 32 MiB, raised by the loader to three of the stream's largest
	// batches). The server holds at most MaxStreams of them, plus one
	// serialized message per stream.
	StreamMemory int64
	// Readers is each stream's batches read in parallel (default 4).
	Readers int
	// MaxMessageBytes bounds one message a client sends (a DoPut batch;
	// default 64 MiB).
	MaxMessageBytes int
	Logger          *slog.Logger // default slog.Default()
}

// The transport's buffer and flow-control window sizes (see New).
const (
	writeBuffer = 1 << 20
	window      = 16 << 20
)

// Server is a Flight service over a cluster's datasets.
type Server struct {
	flight.BaseFlightServer
	cfg   Config
	gs    *grpc.Server
	slots chan struct{} // one per open stream
}

// New makes a server; Serve starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("arrowflight: no cluster client")
	}
	if cfg.Token == "" {
		return nil, errors.New("arrowflight: no cluster token (every call is checked against it)")
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 8
	}
	if cfg.StreamMemory <= 0 {
		cfg.StreamMemory = 32 << 20
	}
	if cfg.Readers <= 0 {
		cfg.Readers = 4
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	unary, stream := auth.TokenAuth(cfg.Token)
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.WaitForHandlers(true),
		// Batches are megabytes: write them in large pieces (gRPC's 32 KiB
		// default costs a syscall each) and let a client's window hold a
		// few batches' worth before it must answer.
		grpc.WriteBufferSize(writeBuffer), grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.ForceServerCodecV2(newCodec())}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(cfg.TLS))
	}
	s := &Server{cfg: cfg, gs: grpc.NewServer(opts...), slots: make(chan struct{}, cfg.MaxStreams)}
	flight.RegisterFlightServiceServer(s.gs, s)
	return s, nil
}

// Serve answers calls on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.cfg.Logger.Info("arrowflight: serving", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	if err := s.gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("arrowflight: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Close ends every call (their streams see CANCELLED) and waits for their
// handlers, which close their loaders, to return.
func (s *Server) Close() error {
	s.gs.Stop()
	return nil
}

// acquire takes a stream slot; release gives it back.
func (s *Server) acquire() (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	default:
		return nil, fmt.Errorf("%w: %d streams open, the server's limit; retry when one ends", errBusy, s.cfg.MaxStreams)
	}
}
