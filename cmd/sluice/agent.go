package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/sdk"
)

func newAgentCmd() *cobra.Command {
	var cf connFlags
	var cfg sdk.AgentConfig
	var hf httpFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the local agent: serve applications' shared-memory I/O rings",
		Long: `Connects to the cluster and serves applications on this machine through
shared-memory rings (USRBIO-style): an application hands its buffer and rings
to the agent over --socket (sdk.DialAgent in Go), opens files through it, and
submits batches of reads and writes that storage moves straight into and out
of its buffer. Ctrl-C stops it. ` + "`sluice mount`" + ` hosts the same agent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Path == "" {
				cfg.Path = filepath.Join(os.TempDir(), "sluice-agent.sock")
			}
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			a, err := sdk.NewAgent(c, cfg)
			if err != nil {
				return err
			}
			hs, err := hf.serve(cmd, cf.tokenOrEnv(), httpSources{metrics: c.Metrics().Gatherer()})
			if err != nil {
				a.Close()
				return err
			}
			defer hs.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "agent serving at %s\n", cfg.Path)
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(stop)
			select {
			case <-stop:
			case <-cmd.Context().Done():
			}
			return a.Close()
		},
	}
	cf.add(cmd)
	hf.add(cmd)
	cmd.Flags().StringVar(&cfg.Path, "socket", "", "unix socket applications dial (default $TMPDIR/sluice-agent.sock)")
	cmd.Flags().DurationVar(&cfg.Lease, "lease", 2*time.Second, "how stale a client's heartbeat may get before it is reclaimed")
	cmd.Flags().IntVar(&cfg.Batch, "batch", 128, "ring entries taken at a time")
	return cmd
}
