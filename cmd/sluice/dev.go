package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

func newDevCmd() *cobra.Command {
	var cfg cluster.Config
	var agentSocket string
	var hf httpFlags
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
fabric, without a socket in the data path.`,
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
			if agentSocket != "" {
				cl, err := sdk.Connect(cmd.Context(), sdk.Config{Cluster: c.Addr, Token: c.Token, Fabric: c.Fabric()})
				if err != nil {
					return err
				}
				defer cl.Close()
				clientMetrics = cl.Metrics().Gatherer()
				a, err := sdk.NewAgent(cl, sdk.AgentConfig{Path: agentSocket})
				if err != nil {
					return err
				}
				defer a.Close() // before the client and the cluster
				fmt.Fprintf(cmd.ErrOrStderr(), "sluice dev: local agent at %s\n", agentSocket)
			}
			hs, err := hf.serve(cmd, c.Token, httpSources{metrics: prometheus.Gatherers{c.Metrics(), clientMetrics}, ready: c.Ready, api: c.API})
			if err != nil {
				return err
			}
			defer hs.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "export SLUICE_CLUSTER=%s\n", c.Addr)
			fmt.Fprintf(out, "export SLUICE_TOKEN=%s\n", c.Token)
			if agentSocket != "" {
				fmt.Fprintf(out, "export SLUICE_AGENT=%s\n", agentSocket)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice dev: %d targets in %s; Ctrl-C to stop\n", cfg.Targets, cfg.Dir)
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			select {
			case <-stop:
			case <-cmd.Context().Done():
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.Dir, "dir", "", "directory for the cluster's data (default ~/.sluice-dev)")
	cmd.Flags().IntVar(&cfg.Targets, "targets", 3, "storage targets")
	cmd.Flags().IntVar(&cfg.Replicas, "replicas", 3, "replicas per chain")
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:7400", "gRPC address for clients")
	cmd.Flags().DurationVar(&cfg.CollectDelay, "collect-delay", time.Minute, "how long unlinked files' chunks stay before the collector removes them")
	hf.add(cmd)
	cmd.Flags().StringVar(&agentSocket, "agent-socket", "", `unix socket of the local agent (default DIR/agent.sock; "" for none)`)
	return cmd
}
