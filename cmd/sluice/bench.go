package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fabric/tcp"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure parts of Sluice on this machine",
	}
	cmd.AddCommand(newBenchFabricCmd())
	return cmd
}

type fabricBenchFlags struct {
	transport string
	size      string
	duration  time.Duration
	checksum  bool
}

func newBenchFabricCmd() *cobra.Command {
	var f fabricBenchFlags
	cmd := &cobra.Command{
		Use:   "fabric",
		Short: "Move data between two fabric endpoints on this machine and report throughput and latency",
		Long: `Starts a server and a client endpoint (over TCP loopback, or in-process with
--transport local), then for --duration each: pulls (Read) and pushes (Write)
--size bytes of registered memory, checking the bytes that arrive, and makes
64-byte calls. Prints operations per second, throughput and latency
percentiles. For ratios against a plain socket, see 'make bench'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := parseSize(f.size)
			if err != nil {
				return err
			}
			return benchFabric(cmd.Context(), cmd.OutOrStdout(), f, size)
		},
	}
	cmd.Flags().StringVar(&f.transport, "transport", "tcp", "tcp or local")
	cmd.Flags().StringVar(&f.size, "size", "1MiB", "bytes per Read/Write (e.g. 4KiB, 1MiB)")
	cmd.Flags().DurationVar(&f.duration, "duration", 2*time.Second, "how long to run each operation")
	cmd.Flags().BoolVar(&f.checksum, "data-checksum", false, "tcp: checksum payloads on the wire too")
	return cmd
}

// parseSize reads "4096", "4KiB", "1MiB" or "1GiB".
func parseSize(s string) (int, error) {
	units := []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.Atoi(strings.TrimSpace(num))
			if err != nil || n < 0 || n > (1<<30)/u.mult {
				return 0, fmt.Errorf("bad size %q: want a number with an optional KiB, MiB or GiB suffix, at most 1GiB", s)
			}
			return n * u.mult, nil
		}
	}
	return 0, fmt.Errorf("bad size %q", s)
}

func benchFabric(ctx context.Context, out io.Writer, f fabricBenchFlags, size int) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var tr fabric.Transport
	switch f.transport {
	case "tcp":
		secret := make([]byte, 32)
		rand.Read(secret)
		t, err := tcp.New(tcp.Config{Secret: secret, DataChecksum: f.checksum, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		tr = t
	case "local":
		tr = local.NewNetwork()
	default:
		return fmt.Errorf("unknown transport %q: want tcp or local", f.transport)
	}
	addr := "127.0.0.1:0"
	if f.transport == "local" {
		addr = "bench-server"
	}
	srv, err := tr.Listen(addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	cli, err := tr.Dialer("bench")
	if err != nil {
		return err
	}
	defer cli.Close()
	fabric.Handle(srv, "echo", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		return req, nil
	})

	region := make([]byte, size)
	rand.Read(region)
	mr, err := srv.RegisterMemory(region, fabric.AccessRemoteReadWrite)
	if err != nil {
		return err
	}
	defer mr.Deregister()
	rb := mr.Remote(0, size)
	buf := make([]byte, size)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "op\tsize\tops/s\tMB/s\tp50\tp99\t\n")
	report := func(op string, n int, lat []time.Duration, total time.Duration) {
		slices.Sort(lat)
		ops := float64(len(lat)) / total.Seconds()
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%v\t%v\t\n", op, n, ops, ops*float64(n)/1e6,
			lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	}
	run := func(op func() error) ([]time.Duration, time.Duration, error) {
		var lat []time.Duration
		start := time.Now()
		for time.Since(start) < f.duration {
			t0 := time.Now()
			if err := op(); err != nil {
				return nil, 0, err
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, time.Since(start), nil
	}

	lat, total, err := run(func() error { return cli.Read(ctx, rb, buf) })
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(buf, region) {
		return fmt.Errorf("read: bytes differ from the server's")
	}
	mr.Fence() // the server looked at region; the client writes it next
	report("read", size, lat, total)

	rand.Read(buf)
	lat, total, err = run(func() error { return cli.Write(ctx, buf, rb) })
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	mr.Fence()
	if !bytes.Equal(buf, region) {
		return fmt.Errorf("write: server's bytes differ from those written")
	}
	report("write", size, lat, total)

	req := wrapperspb.Bytes(make([]byte, 62))
	var resp wrapperspb.BytesValue
	lat, total, err = run(func() error { return cli.Call(ctx, srv.ID(), "echo", req, &resp) })
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	report("call", 64, lat, total)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "fabric over %s (%s): every byte checked, all operations succeeded\n", f.transport, srv.ID())
	return err
}
