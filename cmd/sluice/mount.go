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
	"github.com/sluicefs/sluice/sdk/fuse"
)

func newMountCmd() *cobra.Command {
	var cf connFlags
	var cfg fuse.Config
	var agentCfg sdk.AgentConfig
	var hf httpFlags
	cmd := &cobra.Command{
		Use:   "mount MOUNTPOINT",
		Short: "Mount the cluster through FUSE, for tools that only speak POSIX",
		Long: `Mounts the cluster at MOUNTPOINT and serves it until SIGINT or SIGTERM, then
unmounts (lazily if a process still holds a file there). A stale mount left by
a process that died is cleaned up first. Needs /dev/fuse, and root or
fusermount3 (package fuse3).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			cfg.Logger = slog.Default()
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(stop)
			m, err := fuse.New(c, dir, cfg)
			if err != nil {
				return err
			}
			// The mount is also the node's local agent (the USRBIO path),
			// on the same client; it stops before the client closes.
			if agentCfg.Path != "" {
				a, err := sdk.NewAgent(c, agentCfg)
				if err != nil {
					m.Close()
					return err
				}
				defer a.Close()
			}
			// Ready while mounted: the mount serves until it ends.
			// /metrics: the client's and the mount's own.
			mountReg := prometheus.NewRegistry()
			mountReg.MustRegister(m.FS.Collectors()...)
			hs, err := hf.serve(cmd, cf.tokenOrEnv(), httpSources{metrics: prometheus.Gatherers{c.Metrics().Gatherer(), mountReg}})
			if err != nil {
				m.Close()
				return err
			}
			defer hs.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "mounted at %s\n", dir)
			if agentCfg.Path != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "agent serving at %s\n", agentCfg.Path)
			}
			select {
			case sig := <-stop:
				cfg.Logger.Info("unmounting", "signal", sig.String(), "dir", dir)
				return m.Close()
			case <-m.Done():
				return nil // unmounted from outside
			}
		},
	}
	cf.add(cmd)
	hf.add(cmd)
	cmd.Flags().BoolVar(&cfg.AllowOther, "allow-other", false, "let other users in (permission checks still apply)")
	cmd.Flags().DurationVar(&cfg.AttrTimeout, "attr-timeout", time.Second, "how long the kernel caches attributes")
	cmd.Flags().DurationVar(&cfg.EntryTimeout, "entry-timeout", time.Second, "how long the kernel caches name lookups (and the mount the names it lists in bulk)")
	cmd.Flags().DurationVar(&cfg.NegativeTimeout, "negative-timeout", 0, "how long the kernel caches that a name does not exist (0: not at all, so a name made elsewhere is found at once)")
	cmd.Flags().DurationVar(&cfg.OpTimeout, "timeout", time.Minute, "limit on each request to the cluster (then EIO)")
	cmd.Flags().StringVar(&agentCfg.Path, "agent-socket", filepath.Join(os.TempDir(), "sluice-agent.sock"), "unix socket of the local agent for shared-memory rings (empty: no agent)")
	cmd.Flags().IntVar(&cfg.Readahead, "readahead", 16<<20, "bytes read ahead of a sequential reader")
	cmd.Flags().Int64Var(&cfg.Cache, "cache", 1<<30, "bytes of open files kept in memory for readers that come back to them, O_DIRECT ones too (negative: none)")
	cmd.Flags().Int64Var(&cfg.WriteBehind, "write-behind", 64<<20, "bytes written to the mount that may still be on their way to storage (close and fsync wait for them); negative: every write waits")
	return cmd
}
