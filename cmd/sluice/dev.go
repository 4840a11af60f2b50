package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/server/cluster"
)

func newDevCmd() *cobra.Command {
	var cfg cluster.Config
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole cluster in this process (metadata, mgmtd, storage targets in --dir)",
		Long: `Starts a one-replica control plane and --targets storage targets in local
directories under --dir, chains of --replicas, and prints the two export lines
a shell needs. Ctrl-C stops it; starting again on the same --dir keeps the
data and the token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Dir == "" {
				home, _ := os.UserHomeDir()
				cfg.Dir = filepath.Join(home, ".sluice-dev")
			}
			c, err := cluster.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "export SLUICE_CLUSTER=%s\n", c.Addr)
			fmt.Fprintf(out, "export SLUICE_TOKEN=%s\n", c.Token)
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
	return cmd
}
