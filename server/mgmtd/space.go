package mgmtd

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// TargetSpace returns each target's disk as its last heartbeat reported
// it, by target id, for the targets whose lease is current: a target that
// stopped heartbeating is left out rather than shown with figures from
// before it went quiet. The values are copies.
func (d *Detector) TargetSpace() map[uint32]*mgmtdpb.TargetSpace {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[uint32]*mgmtdpb.TargetSpace, len(d.space))
	for id, sp := range d.space {
		if now.Sub(d.seen[id]) <= d.lease {
			out[id] = proto.Clone(sp).(*mgmtdpb.TargetSpace)
		}
	}
	return out
}
