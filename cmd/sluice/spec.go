package main

import (
	"bytes"
	"fmt"
	"math/bits"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicefs/sluice/server/mgmtd"
	"go.yaml.in/yaml/v3"
)

// clusterSpec is a whole cluster described once (`sluice server --spec FILE
// --node NAME`, `sluice cluster check --spec FILE`): YAML, or JSON (which
// YAML reads too). Keys the spec does not know are errors naming the key
// and its line, so a misspelt key is never silently a default.
//
// There is one way to run a process: a node's part of the spec is
// translated (serverConfig, below) into the per-process config that
// `sluice server --config` runs, so a spec can never mean something a
// hand-written config could not.
//
//	token_file: /etc/sluice/token
//	replicas: 3
//	meta:
//	  - {name: m1, address: 10.0.0.1:7400, raft_address: 10.0.0.1:7401, dir: /srv/sluice}
//	storage:
//	  - {name: s1, address: 10.0.0.5:7410, rack: r1, dir: /srv/sluice, targets: [1, 2]}
type clusterSpec struct {
	// TokenFile is the cluster token, the same file on every host
	// (required: nodes' directories differ, so there is no one default).
	// A meta replica makes it when there is none; copy it to every host.
	TokenFile string `yaml:"token_file"`
	// Replicas is each chain's length (default 3). The chain table needs at
	// least this many failure domains (see domains).
	Replicas *int `yaml:"replicas"`
	// ChunkSize is the root directory's chunk size in bytes, a power of two
	// from 64 KiB to 64 MiB (default 1 MiB).
	ChunkSize int `yaml:"chunk_size"`
	// Stripe is how many chains a file's chunks rotate over (default: the
	// number of targets).
	Stripe int `yaml:"stripe"`
	// CollectDelay is how long unlinked files' chunks stay before they are
	// removed, as Go writes durations ("30s", "1m"; default 1 minute).
	CollectDelay string `yaml:"collect_delay"`
	// MaxMoves bounds the replica moves (drain, rebalance) in flight in
	// the cluster (default 4); MaxMovesPerTarget those one target takes
	// part in (default 1).
	MaxMoves          int `yaml:"max_moves"`
	MaxMovesPerTarget int `yaml:"max_moves_per_target"`
	// SnapshotEvery is how many log entries a control-plane replica
	// applies between snapshots of the namespace, each of which writes the
	// whole namespace (default 8192).
	SnapshotEvery uint64 `yaml:"snapshot_every"`
	// InlineMax is the largest file whose bytes the metadata service
	// keeps itself, written at close with no chunk (default 4096; -1:
	// none).
	InlineMax int `yaml:"inline_max"`
	// DropLeft is how long a target is out of a chain a replica move took
	// it from before its chunks of the chain are removed, as Go writes
	// durations (default "10m").
	DropLeft string `yaml:"drop_left"`
	// HTTPGuard requires the token on every node's /metrics, /healthz,
	// /readyz and /openapi.json too (default false: only the REST API).
	HTTPGuard bool `yaml:"http_guard"`
	// Dir is the default data directory of nodes that name none.
	Dir     string        `yaml:"dir"`
	Meta    []metaSpec    `yaml:"meta"`
	Storage []storageSpec `yaml:"storage"`
}

// metaSpec is one control-plane replica.
type metaSpec struct {
	Name string `yaml:"name"`
	// Address is where clients and storage nodes reach it (gRPC).
	Address string `yaml:"address"`
	// RaftAddress is its Raft peers' address; required with more than one
	// replica (with one, default 127.0.0.1 on a free port).
	RaftAddress string `yaml:"raft_address"`
	// Dir is its data directory (default the spec's dir); the replica
	// keeps its state under Dir/meta.
	Dir string `yaml:"dir"`
	// HTTP is where it serves /metrics, /healthz, /readyz and the REST API
	// (default: no HTTP).
	HTTP string `yaml:"http"`
}

// storageSpec is one storage node.
type storageSpec struct {
	Name string `yaml:"name"`
	// Address is its fabric address, which it registers and peers dial.
	Address string `yaml:"address"`
	// Rack is its failure domain: no two replicas of a chain share one.
	// A node without a rack is a failure domain of its own.
	Rack string `yaml:"rack"`
	// Dir is its data directory (default the spec's dir); target N lives
	// in Dir/target-N.
	Dir string `yaml:"dir"`
	// Targets are its target ids, unique in the cluster, each 1 or more.
	Targets []uint32 `yaml:"targets"`
	HTTP    string   `yaml:"http"`
}

const (
	defaultReplicas  = 3
	defaultChunkSize = 1 << 20
	minChunkSize     = 64 << 10
	maxChunkSize     = 64 << 20
)

// loadSpec reads and strictly decodes the spec at path.
func loadSpec(path string) (*clusterSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	s, err := parseSpec(b)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", path, err)
	}
	return s, nil
}

// unknownKey matches yaml.v3's words for a key the type does not have.
var unknownKey = regexp.MustCompile(`line (\d+): field (\S+) not found in type [\w.]+`)

// parseSpec decodes a spec, refusing keys it does not know.
func parseSpec(b []byte) (*clusterSpec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s clusterSpec
	if err := dec.Decode(&s); err != nil {
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), "\n  ", "; ")
		return nil, fmt.Errorf("%s", unknownKey.ReplaceAllString(msg, `line $1: unknown key "$2"`))
	}
	return &s, nil
}

func (s *clusterSpec) replicas() int {
	if s.Replicas == nil {
		return defaultReplicas
	}
	return *s.Replicas
}

func (s *clusterSpec) chunkSize() int {
	if s.ChunkSize == 0 {
		return defaultChunkSize
	}
	return s.ChunkSize
}

func (s *clusterSpec) targets() int {
	n := 0
	for _, st := range s.Storage {
		n += len(st.Targets)
	}
	return n
}

func (s *clusterSpec) dir(d string) string {
	if d == "" {
		return s.Dir
	}
	return d
}

// serverConfig is node name's per-process config and role ("meta" or
// "storage"). It refuses a spec with problems other than its files (a meta
// replica makes a missing token file).
func (s *clusterSpec) serverConfig(name string) (serverConfig, string, error) {
	var cfg serverConfig
	if ps := s.problems(false); len(ps) > 0 {
		return cfg, "", fmt.Errorf("%s (sluice cluster check --spec lists every problem)", strings.Join(ps, "; "))
	}
	cfg.TokenFile = s.TokenFile
	cfg.HTTPGuard = s.HTTPGuard
	for _, m := range s.Meta {
		if m.Name != name {
			continue
		}
		cfg.Dir, cfg.HTTP = s.dir(m.Dir), m.HTTP
		cm := &cfg.Meta
		cm.ID, cm.Listen, cm.RaftBind = m.Name, m.Address, m.RaftAddress
		if len(s.Meta) > 1 {
			cm.Members = map[string]string{}
			for _, p := range s.Meta {
				cm.Members[p.Name] = p.RaftAddress
			}
		}
		cm.ChunkSize, cm.Stripe, cm.ExpectTargets, cm.Replicas = s.chunkSize(), s.Stripe, s.targets(), s.replicas()
		if cm.Stripe == 0 {
			cm.Stripe = cm.ExpectTargets
		}
		cm.CollectDelay = s.CollectDelay
		cm.MaxMoves, cm.MaxMovesPerTarget = s.MaxMoves, s.MaxMovesPerTarget
		cm.SnapshotEvery = s.SnapshotEvery
		cm.InlineMax = s.InlineMax
		return cfg, "meta", nil
	}
	for _, st := range s.Storage {
		if st.Name != name {
			continue
		}
		cfg.Dir, cfg.HTTP = s.dir(st.Dir), st.HTTP
		var addrs []string
		for _, m := range s.Meta {
			addrs = append(addrs, m.Address)
		}
		cs := &cfg.Storage
		cs.Cluster, cs.NodeID, cs.Rack, cs.FabricListen = strings.Join(addrs, ","), st.Name, st.Rack, st.Address
		cs.Targets, cs.ChunkSize, cs.DropLeft = slices.Clone(st.Targets), s.chunkSize(), s.DropLeft
		return cfg, "storage", nil
	}
	return cfg, "", fmt.Errorf("no node %q in the spec", name)
}

// problems lists what is wrong with the spec, one line each, in the
// spec's order; with files, it also reads the token file.
func (s *clusterSpec) problems(files bool) []string {
	var ps []string
	add := func(format string, a ...any) { ps = append(ps, fmt.Sprintf(format, a...)) }
	if len(s.Meta) == 0 {
		add("no meta replicas")
	}
	if len(s.Storage) == 0 {
		add("no storage nodes")
	}
	if r := s.replicas(); r < 1 {
		add("replicas %d: want 1 or more", r)
	}
	if c := s.ChunkSize; c != 0 && (c < minChunkSize || c > maxChunkSize || bits.OnesCount(uint(c)) != 1) {
		add("chunk_size %d: want a power of two from %d (64 KiB) to %d (64 MiB)", c, minChunkSize, maxChunkSize)
	}
	if s.Stripe < 0 {
		add("stripe %d: want 1 or more", s.Stripe)
	}
	if s.DropLeft != "" {
		if d, err := time.ParseDuration(s.DropLeft); err != nil || d <= 0 {
			add("drop_left %q: want a positive duration such as \"10m\"", s.DropLeft)
		}
	}
	if s.CollectDelay != "" {
		if d, err := time.ParseDuration(s.CollectDelay); err != nil || d <= 0 {
			add("collect_delay %q: want a positive duration such as \"1m\"", s.CollectDelay)
		}
	}
	switch {
	case s.TokenFile == "":
		add("no token_file")
	case files:
		if b, err := os.ReadFile(s.TokenFile); err != nil {
			add("token_file %s: %v", s.TokenFile, unwrapPath(err))
		} else if len(bytes.TrimSpace(b)) == 0 {
			add("token_file %s: empty", s.TokenFile)
		}
	}
	names := map[string]string{}   // name -> where first seen
	addrs := map[string]string{}   // host:port -> which node's which address
	targets := map[uint32]string{} // target -> node
	name := func(role string, i int, n string) string {
		if n == "" {
			add("%s[%d]: no name", role, i)
			return fmt.Sprintf("%s[%d]", role, i)
		}
		if prev, ok := names[n]; ok {
			add("%s %s: name already used by %s", role, n, prev)
		} else {
			names[n] = role + " " + n
		}
		return role + " " + n
	}
	address := func(who, key, a string, required bool) {
		if a == "" {
			if required {
				add("%s: no %s", who, key)
			}
			return
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			add("%s: %s %q: want host:port", who, key, a)
			return
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil {
			add("%s: %s %q: port %q is not a number from 0 to 65535", who, key, a, port)
			return
		} else if p == 0 {
			return // any free port: never the same as another
		}
		k := net.JoinHostPort(host, port)
		if prev, ok := addrs[k]; ok {
			add("%s: %s %s already used by %s", who, key, k, prev)
			return
		}
		addrs[k] = who + " " + key
	}
	for i, m := range s.Meta {
		who := name("meta", i, m.Name)
		address(who, "address", m.Address, true)
		address(who, "raft_address", m.RaftAddress, len(s.Meta) > 1)
		address(who, "http", m.HTTP, false)
		if s.dir(m.Dir) == "" {
			add("%s: no dir (and no dir for the cluster)", who)
		}
	}
	domains := map[string]bool{}
	for i, st := range s.Storage {
		who := name("storage", i, st.Name)
		address(who, "address", st.Address, true)
		address(who, "http", st.HTTP, false)
		if s.dir(st.Dir) == "" {
			add("%s: no dir (and no dir for the cluster)", who)
		}
		if len(st.Targets) == 0 {
			add("%s: no targets", who)
		}
		for _, t := range st.Targets {
			if t == 0 {
				add("%s: target 0: target ids start at 1", who)
			} else if prev, ok := targets[t]; ok {
				add("%s: target %d already on %s", who, t, prev)
			} else {
				targets[t] = who
			}
		}
		domains[mgmtd.FailureDomain(who, st.Rack)] = true
	}
	if r := s.replicas(); len(s.Storage) > 0 && r > len(domains) {
		add("replicas %d: only %d failure domains (distinct racks; a node without a rack counts alone), want %d or more", r, len(domains), r)
	}
	return ps
}

// unwrapPath is err without the path an *os.PathError repeats.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
