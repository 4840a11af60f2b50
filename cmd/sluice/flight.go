package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/arrowflight"
	"github.com/sluicefs/sluice/rpc"
	"github.com/sluicefs/sluice/sdk"
)

// flightFlags configure an Arrow Flight server (sluice flight, sluice dev --flight).
type flightFlags struct {
	certFile, keyFile string
	maxStreams        int
	streamMiB         int64
}

func (f *flightFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.certFile, "flight-tls-cert", "", "TLS certificate (PEM) of the Flight server; plaintext without")
	cmd.Flags().StringVar(&f.keyFile, "flight-tls-key", "", "TLS key (PEM) of the Flight server")
	cmd.Flags().IntVar(&f.maxStreams, "flight-max-streams", 8, "Flight streams served at once (more are refused with RESOURCE_EXHAUSTED)")
	cmd.Flags().Int64Var(&f.streamMiB, "flight-stream-mib", 32, "memory budget of each Flight stream's loader, MiB")
}

// serveFlight starts a Flight server over c on addr. It prints the
// address clients use as an export line on out; stop ends it and waits for
// its calls.
func serveFlight(c *sdk.Client, token, addr string, f flightFlags, out io.Writer) (stop func(), err error) {
	cfg := arrowflight.Config{Client: c, Token: token, MaxStreams: f.maxStreams, StreamMemory: f.streamMiB << 20}
	scheme := "grpc"
	if f.certFile != "" || f.keyFile != "" {
		if cfg.TLS, err = rpc.ServerTLS(f.certFile, f.keyFile); err != nil {
			return nil, fmt.Errorf("flight TLS: %w", err)
		}
		scheme = "grpc+tls"
	}
	s, err := arrowflight.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("flight: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(ln); err != nil {
			slog.Error("sluice: flight server stopped", "err", err)
		}
	}()
	fmt.Fprintf(out, "export SLUICE_FLIGHT=%s://%s\n", scheme, ln.Addr())
	return func() { s.Close(); <-done }, nil
}

// waitForSignal returns on SIGINT, SIGTERM or the end of ctx.
func waitForSignal(ctx context.Context) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)
	select {
	case <-stop:
	case <-ctx.Done():
	}
}

func newFlightCmd() *cobra.Command {
	var cf connFlags
	var ff flightFlags
	var listen string
	cmd := &cobra.Command{
		Use:   "flight --listen ADDR",
		Short: "Serve the cluster's datasets to Arrow Flight clients (pyarrow.flight, DuckDB, Spark, ...)",
		Long: `Serves datasets over Arrow Flight: ListFlights lists them; GetFlightInfo on a
JSON command ({"dataset": NAME, "batch_size": 256, "shuffle": true, "seed": 0,
"epoch": 0, "world_size": 4, "columns": [...], "state": {...}}) returns one
endpoint per rank; DoGet streams a rank's batches in loader order with the
resume state as each batch's app metadata; DoPut imports a stream as a new
dataset. Clients send the cluster token as "authorization: Bearer TOKEN".
It prints "export SLUICE_FLIGHT=grpc://ADDR" once serving.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			stop, err := serveFlight(c, cf.tokenOrEnv(), listen, ff, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			defer stop()
			waitForSignal(cmd.Context())
			return nil
		},
	}
	cf.add(cmd)
	ff.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7470", "address to serve Flight on")
	return cmd
}
