package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicefs/sluice/sdk"
)

// writeStatus writes the cluster's state for people, one line per item, in a
// stable order and form that scripts may grep:
//
//	metadata: leader ID@ADDR, STATE, applied N, N inodes, members [...]
//	space: FREE of CAPACITY free for files, BYTES in files (N targets reporting)
//	target ID: STATE at NODE (ADDRESS)[, full][, draining], chains C:STATE ..., disk FREE free of TOTAL
//	chain ID vVERSION: TARGET:STATE ...[, leaving [TARGET ...]]
//	moves: N done, N in flight, N to go, N cancelled; rebalance on|off
//	move chain C: target FROM -> target TO (STATE)
//	draining: targets T ...; drained (in no chain, safe to stop): T ...
//
// The moves lines come only when the control plane reports them, the
// draining line only while targets drain.
// A target's disk reads "disk unknown" when the metadata leader has no
// current report of it; a target in no chain reads "chains none".
func writeStatus(w io.Writer, st *sdk.ClusterStatus) {
	m := st.Meta
	fmt.Fprintf(w, "metadata: leader %s, %s, applied %d, %d inodes, members %v\n", m.Leader, m.State, m.AppliedIndex, m.Inodes, m.Members)
	if u := st.Usage; u != nil {
		fmt.Fprintf(w, "space: %s of %s free for files, %s in files (%d targets reporting); %d small files, %s, kept by the metadata service\n",
			bytesIEC(u.Free), bytesIEC(u.Capacity), bytesIEC(u.Bytes), u.Targets, u.InlineFiles, bytesIEC(u.InlineBytes))
	}
	pairs := func(parts []string) string {
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, " ")
	}
	for _, t := range st.Targets {
		full := ""
		if t.Full {
			full = ", full"
		}
		if t.Draining {
			full += ", draining"
		}
		disk := "disk unknown"
		if t.Space != nil {
			disk = fmt.Sprintf("disk %s free of %s", bytesIEC(t.Space.FreeBytes), bytesIEC(t.Space.TotalBytes))
		}
		var chains []string
		for _, m := range t.Chains {
			chains = append(chains, fmt.Sprintf("%d:%s", m.Chain, m.State))
		}
		fmt.Fprintf(w, "target %d: %s at %s (%s)%s, chains %s, %s\n", t.ID, t.State, t.Node, t.Address, full, pairs(chains), disk)
	}
	for _, ch := range st.Chains {
		var targets []string
		for _, m := range ch.Targets {
			targets = append(targets, fmt.Sprintf("%d:%s", m.Target, m.State))
		}
		leaving := ""
		if len(ch.Leaving) > 0 {
			leaving = fmt.Sprintf(", leaving %v", ch.Leaving)
		}
		fmt.Fprintf(w, "chain %d v%d: %s%s\n", ch.ID, ch.Version, pairs(targets), leaving)
	}
	if p := st.Moves; p != nil {
		writeMoves(w, p, st.Chains, pairs)
	}
}

// writeMoves is status's moves, move and draining lines.
func writeMoves(w io.Writer, p *sdk.MoveProgress, chains []sdk.ChainStatus, pairs func([]string) string) {
	on := "off"
	if p.Rebalance {
		on = "on"
	}
	fmt.Fprintf(w, "moves: %d done, %d in flight, %d to go, %d cancelled; rebalance %s\n", p.Done, len(p.InFlight), p.ToGo, p.Cancelled, on)
	for _, m := range p.InFlight {
		state := "unknown"
		if i := slices.IndexFunc(chains, func(ch sdk.ChainStatus) bool { return ch.ID == m.Chain }); i >= 0 {
			for _, ct := range chains[i].Targets {
				if ct.Target == m.To {
					state = ct.State
				}
			}
		}
		fmt.Fprintf(w, "move chain %d: target %d -> target %d (%s)\n", m.Chain, m.From, m.To, state)
	}
	if len(p.Draining) > 0 {
		ids := func(xs []uint32) []string {
			var out []string
			for _, x := range xs {
				out = append(out, fmt.Sprint(x))
			}
			return out
		}
		fmt.Fprintf(w, "draining: targets %s; drained (in no chain, safe to stop): %s\n", pairs(ids(p.Draining)), pairs(ids(p.Drained)))
	}
}

// bytesIEC formats n bytes with a binary unit (GiB, TiB).
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
