//go:build verbs

package verbs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config configures a verbs Transport. Zero fields take the documented
// defaults.
type Config struct {
	// Secret is the cluster secret proved in the bootstrap handshake. Required.
	Secret []byte
	// Device names the RDMA device (as in ibv_devices, e.g. "mlx5_0");
	// empty means the first one.
	Device string
	// Port is the device port (default 1).
	Port int
	// GIDIndex selects the port's GID (default 0; RoCE v2 is often 1 or 3,
	// see show_gids).
	GIDIndex int
	// MsgSize is the size of each receive buffer, so the largest RPC message
	// (default 64 KiB).
	MsgSize int
	// RecvBuffers is the depth of the shared receive queue (default 4096).
	RecvBuffers int
	// CreditsPerPeer is how many receive buffers each peer may fill at once
	// (default 64); RecvBuffers / CreditsPerPeer bounds the peers.
	CreditsPerPeer int
	// OneSidedPerPeer bounds RDMA READs and WRITEs in flight per peer, both
	// ways (default 16; at most the NIC's max_qp_rd_atom for READs).
	OneSidedPerPeer int
	// StagingSize is the registered bounce buffer for Reads and Writes whose
	// local buffer is not registered memory (default 8 MiB).
	StagingSize int
	// NUMA places the transport's buffers: "auto" (default) on the device's
	// NUMA node as sysfs reports it, "off" anywhere, or a node number.
	NUMA string
	// DialTimeout bounds dialing, the handshake and the queue-pair exchange
	// (default 5s).
	DialTimeout time.Duration
	// IOTimeout bounds how long a posted operation may take before the
	// connection is declared broken (default 30s).
	IOTimeout time.Duration
	// Logger receives connection events (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if len(c.Secret) == 0 {
		return errors.New("fabric/verbs: a cluster secret is required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Port, 1)
	def(&c.MsgSize, 64<<10)
	def(&c.RecvBuffers, 4096)
	def(&c.CreditsPerPeer, 64)
	def(&c.OneSidedPerPeer, 16)
	def(&c.StagingSize, 8<<20)
	if c.MsgSize < minMsgSize || c.MsgSize > 1<<30 {
		return fmt.Errorf("fabric/verbs: message size %d out of range", c.MsgSize)
	}
	if c.CreditsPerPeer > 0xffff || c.OneSidedPerPeer > 0xffff || c.CreditsPerPeer > c.RecvBuffers {
		return fmt.Errorf("fabric/verbs: credits per peer (%d, %d) out of range", c.CreditsPerPeer, c.OneSidedPerPeer)
	}
	if c.NUMA == "" {
		c.NUMA = "auto"
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
