package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/server/cluster"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// serverConfig is `sluice server --config FILE`: JSON, one process's part.
//
//	{"dir": "/srv/sluice", "token_file": "/etc/sluice/token", "http": "10.0.0.1:7480",
//	 "meta": {"id": "m1", "raft_bind": "10.0.0.1:7401", "listen": "10.0.0.1:7400",
//	          "members": {"m1": "10.0.0.1:7401", ...}, "chunk_size": 1048576,
//	          "stripe": 8, "expect_targets": 12, "replicas": 3},
//	 "storage": {"cluster": "10.0.0.1:7400", "node_id": "s1",
//	             "fabric_listen": "10.0.0.5:7410", "targets": [1, 2, 3]}}
type serverConfig struct {
	Dir       string `json:"dir"`
	TokenFile string `json:"token_file"`
	// HTTP is the address of /metrics, /healthz, /readyz and (meta) the
	// REST API; --http overrides it.
	HTTP string `json:"http"`
	// HTTPGuard is --http-guard's default; the flag overrides it.
	HTTPGuard bool `json:"http_guard"`
	Meta      struct {
		ID            string            `json:"id"`
		RaftBind      string            `json:"raft_bind"`
		Listen        string            `json:"listen"`
		Members       map[string]string `json:"members"`
		ChunkSize     int               `json:"chunk_size"`
		Stripe        int               `json:"stripe"`
		ExpectTargets int               `json:"expect_targets"`
		Replicas      int               `json:"replicas"`
		// CollectDelay is how long unlinked files' chunks stay before
		// the collector removes them, as Go writes durations ("1m",
		// "30s"; default 1 minute).
		CollectDelay string `json:"collect_delay"`
		// MaxMoves and MaxMovesPerTarget throttle replica moves (drain,
		// rebalance): in flight in the cluster (default 4) and per
		// target (default 1).
		MaxMoves          int `json:"max_moves"`
		MaxMovesPerTarget int `json:"max_moves_per_target"`
		// SnapshotEvery is how many log entries the replica applies
		// between snapshots of the namespace (default 8192). Each
		// snapshot writes the whole namespace.
		SnapshotEvery uint64 `json:"snapshot_every"`
		// InlineMax is the largest file whose bytes the metadata
		// service keeps itself, written at close with no chunk (default
		// 4096; -1: none).
		InlineMax int `json:"inline_max"`
	} `json:"meta"`
	Storage struct {
		Cluster      string   `json:"cluster"`
		NodeID       string   `json:"node_id"`
		Rack         string   `json:"rack"` // optional failure domain, see cluster.StorageConfig
		FabricListen string   `json:"fabric_listen"`
		Targets      []uint32 `json:"targets"`
		ChunkSize    int      `json:"chunk_size"`
		// DropLeft is how long a target is out of a chain a replica move
		// took it from before its chunks of the chain are removed, as Go
		// writes durations (default "10m").
		DropLeft string `json:"drop_left"`
	} `json:"storage"`
}

func newServerCmd() *cobra.Command {
	var role, config, spec, node string
	var hf httpFlags
	cmd := &cobra.Command{
		Use:   "server (--spec FILE --node NAME | --role meta|storage --config FILE)",
		Short: "Run one process of a cluster: a control-plane replica or a storage node",
		Long: `Run one process of a cluster: a control-plane replica or a storage node.

With --spec, the process is node NAME of a cluster spec (see sluice cluster
check), translated into the per-process config --config takes; --role, when
given, must be the node's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadServerConfig(&role, config, spec, node)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("http") {
				hf.addr = cfg.HTTP
			}
			if !cmd.Flags().Changed("http-guard") {
				hf.guard = cfg.HTTPGuard
			}
			logger := slog.Default()
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				return err
			}
			token, err := auth.LoadToken(cfg.TokenFile)
			if err != nil {
				return err
			}
			var closer interface{ Close() error }
			var src httpSources
			switch role {
			case "meta":
				m := cfg.Meta
				var delay time.Duration
				if m.CollectDelay != "" {
					if delay, err = time.ParseDuration(m.CollectDelay); err != nil || delay <= 0 {
						return fmt.Errorf("%s: meta.collect_delay %q: want a positive duration such as \"1m\"", config, m.CollectDelay)
					}
				}
				c, err := cluster.StartControl(cmd.Context(), cluster.ControlConfig{Dir: filepath.Join(cfg.Dir, "meta"), ID: m.ID, RaftBind: m.RaftBind,
					Listen: m.Listen, Token: token, Members: m.Members, ChunkSize: m.ChunkSize, Stripe: m.Stripe, ExpectTargets: m.ExpectTargets, Replicas: m.Replicas,
					CollectDelay: delay, SnapshotEvery: m.SnapshotEvery, InlineMax: m.InlineMax, Moves: mgmtd.PlannerConfig{MaxMoves: m.MaxMoves, MaxPerTarget: m.MaxMovesPerTarget}, Logger: logger})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "meta serving on %s\n", c.Addr)
				closer = c
				src = httpSources{metrics: c.Metrics(), ready: c.Ready, api: c.API}
			case "storage":
				s := cfg.Storage
				var dropLeft time.Duration
				if s.DropLeft != "" {
					if dropLeft, err = time.ParseDuration(s.DropLeft); err != nil || dropLeft <= 0 {
						return fmt.Errorf("%s: storage.drop_left %q: want a positive duration such as \"10m\"", config, s.DropLeft)
					}
				}
				n, err := cluster.StartStorage(cmd.Context(), cluster.StorageConfig{Dir: cfg.Dir, Cluster: s.Cluster, Token: token, NodeID: s.NodeID, Rack: s.Rack,
					FabricListen: s.FabricListen, Targets: s.Targets, ChunkSize: s.ChunkSize, DropLeft: dropLeft, Logger: logger})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "storage node %s serving targets %v\n", s.NodeID, s.Targets)
				closer = n
				src = httpSources{metrics: n.Metrics(), ready: n.Ready}
			default:
				return fmt.Errorf("--role must be meta or storage, not %q", role)
			}
			defer closer.Close()
			hs, err := hf.serve(cmd, token, src)
			if err != nil {
				return err
			}
			defer hs.Close() // before the process it reports on
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			select {
			case <-stop:
			case <-cmd.Context().Done():
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "meta or storage")
	cmd.Flags().StringVar(&config, "config", "", "the process's JSON config")
	cmd.Flags().StringVar(&spec, "spec", "", "the cluster's spec (YAML or JSON), with --node")
	cmd.Flags().StringVar(&node, "node", "", "this process's node name in --spec")
	hf.add(cmd)
	cmd.MarkFlagsMutuallyExclusive("spec", "config")
	cmd.MarkFlagsRequiredTogether("spec", "node")
	return cmd
}

// loadServerConfig is the process's config: node's part of the spec, or
// the config file with --role. It sets role from the spec.
func loadServerConfig(role *string, config, spec, node string) (serverConfig, error) {
	var cfg serverConfig
	switch {
	case spec != "":
		s, err := loadSpec(spec)
		if err != nil {
			return cfg, err
		}
		cfg, r, err := s.serverConfig(node)
		if err != nil {
			return cfg, fmt.Errorf("spec %s: %w", spec, err)
		}
		if *role != "" && *role != r {
			return cfg, fmt.Errorf("spec %s: node %s is a %s node, not %s", spec, node, r, *role)
		}
		*role = r
		return cfg, nil
	case config == "":
		return cfg, fmt.Errorf("want --spec FILE --node NAME, or --role meta|storage --config FILE")
	case *role == "":
		return cfg, fmt.Errorf("--config needs --role meta|storage")
	}
	b, err := os.ReadFile(config)
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", config, err)
	}
	if cfg.Dir == "" {
		return cfg, fmt.Errorf("config %s: no dir", config)
	}
	if cfg.TokenFile == "" {
		cfg.TokenFile = filepath.Join(cfg.Dir, "token")
	}
	return cfg, nil
}
