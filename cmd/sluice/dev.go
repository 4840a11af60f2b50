package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
	"github.com/sluicefs/sluice/server/meta"
)

func newDevCmd() *cobra.Command {
	var cfg cluster.Config
	var agentSocket, flightAddr string
	var hf httpFlags
	var ff flightFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole cluster in this process (metadata, mgmtd, storage targets in --dir)",
		Long: `Starts a one-replica control plane and --targets storage targets in local
directories under --dir, chains of --replicas, and prints the two export lines
a shell needs. Ctrl-C stops it; starting again on the same --dir keeps the
data and the token.

It also hosts the local agent (--agent-socket, default DIR/agent.sock): other
processes on this machine that do their I/O through shared-memory rings
(sdk.DialAgent) reach storage by memory copy, through the cluster's in-process
fabric, without a socket in the data path.

It prints export SLUICE_AGENT=SOCKET after the first two lines (loaders
read through the agent when it is set). With --flight ADDR it also serves
the datasets over Arrow Flight (see sluice flight) and prints a last line,
export SLUICE_FLIGHT=grpc://ADDR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Logger = slog.Default()
			if cfg.Dir == "" {
				home, _ := os.UserHomeDir()
				cfg.Dir = filepath.Join(home, ".sluice-dev")
			}
			c, err := cluster.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			var clientMetrics prometheus.Gatherer = prometheus.Gatherers{}
			if !cmd.Flags().Changed("agent-socket") {
				agentSocket = filepath.Join(cfg.Dir, "agent.sock")
			}
			out := cmd.OutOrStdout()
			var flightLine strings.Builder // export SLUICE_FLIGHT=..., printed after the others
			if agentSocket != "" || flightAddr != "" {
				// The agent and the Flight server reach storage through
				// the cluster's in-process fabric.
				cl, err := sdk.Connect(cmd.Context(), sdk.Config{Cluster: c.Addr, Token: c.Token, Fabric: c.Fabric()})
				if err != nil {
					return err
				}
				defer cl.Close()
				clientMetrics = cl.Metrics().Gatherer()
				if agentSocket != "" {
					a, err := sdk.NewAgent(cl, sdk.AgentConfig{Path: agentSocket})
					if err != nil {
						return err
					}
					defer a.Close() // before the client and the cluster
					fmt.Fprintf(cmd.ErrOrStderr(), "sluice dev: local agent at %s\n", agentSocket)
				}
				if flightAddr != "" {
					stop, err := serveFlight(cl, c.Token, flightAddr, ff, &flightLine)
					if err != nil {
						return err
					}
					defer stop() // before the client and the cluster
				}
			}
			hs, err := hf.serve(cmd, c.Token, httpSources{metrics: prometheus.Gatherers{c.Metrics(), clientMetrics}, ready: c.Ready, api: c.API})
			if err != nil {
				return err
			}
			defer hs.Close()
			fmt.Fprintf(out, "export SLUICE_CLUSTER=%s\n", c.Addr)
			fmt.Fprintf(out, "export SLUICE_TOKEN=%s\n", c.Token)
			if agentSocket != "" {
				fmt.Fprintf(out, "export SLUICE_AGENT=%s\n", agentSocket)
			}
			fmt.Fprint(out, flightLine.String()) // last: parsers read the first lines
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice dev: %d targets in %s; Ctrl-C to stop\n", cfg.Targets, cfg.Dir)
			waitForSignal(cmd.Context())
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.Dir, "dir", "", "directory for the cluster's data (default ~/.sluice-dev)")
	cmd.Flags().IntVar(&cfg.Targets, "targets", 3, "storage targets")
	cmd.Flags().IntVar(&cfg.Replicas, "replicas", 3, "replicas per chain")
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:7400", "gRPC address for clients")
	cmd.Flags().DurationVar(&cfg.CollectDelay, "collect-delay", time.Minute, "how long unlinked files' chunks stay before the collector removes them")
	cmd.Flags().IntVar(&cfg.InlineMax, "inline-max", meta.DefaultInlineMax, "largest file whose bytes the metadata service keeps itself, with no chunk (-1: none)")
	hf.add(cmd)
	cmd.Flags().StringVar(&agentSocket, "agent-socket", "", `unix socket of the local agent (default DIR/agent.sock; "" for none)`)
	cmd.Flags().StringVar(&flightAddr, "flight", "", `also serve Arrow Flight on this address ("" for none)`)
	ff.add(cmd)
	return cmd
}
