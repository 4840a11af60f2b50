package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/sdk"
)

// newAdminCmd is `sluice admin`: change a running cluster's shape. Every
// command is idempotent: run again, it changes nothing more.
func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Change a running cluster: drain, undrain and retire storage nodes and targets, rebalance chains"}
	cmd.AddCommand(newDrainCmd(drainOn), newDrainCmd(drainOff), newDrainCmd(drainRetire), newRebalanceCmd())
	return cmd
}

type drainOp int

const (
	drainOn drainOp = iota
	drainOff
	drainRetire
)

// newDrainCmd is `sluice admin drain`, undrain or retire: each names
// storage nodes and targets the same way.
func newDrainCmd(op drainOp) *cobra.Command {
	var cf connFlags
	var nodes []string
	var targets []uint
	var wait bool
	use, short := "drain (--node N | --target T)... [--wait]", "Move every replica off storage nodes or targets (a dead node drained is replaced)"
	switch op {
	case drainOff:
		use, short = "undrain (--node N | --target T)...", "Stop draining storage nodes or targets (moves in flight finish)"
	case drainRetire:
		use, short = "retire (--node N | --target T)...", "Forget drained storage nodes or targets (in no chain any more): safe to switch off"
	}
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(nodes) == 0 && len(targets) == 0 {
				return fmt.Errorf("name a storage node (--node) or a target (--target)")
			}
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			ids := make([]uint32, 0, len(targets))
			for _, t := range targets {
				ids = append(ids, uint32(t))
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			switch op {
			case drainOff:
				p, err := c.Undrain(ctx, nodes, ids)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "draining now: %v\n", p.Draining)
				return nil
			case drainRetire:
				p, err := c.Retire(ctx, nodes, ids)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "retired; draining now: %v\n", p.Draining)
				return nil
			}
			p, err := c.Drain(ctx, nodes, ids)
			if err != nil {
				return err
			}
			st, err := c.ClusterStatus(ctx)
			if err != nil {
				return err
			}
			for _, t := range st.Targets {
				if slices.Contains(nodes, t.Node) && !slices.Contains(ids, t.ID) {
					ids = append(ids, t.ID)
				}
			}
			slices.Sort(ids)
			fmt.Fprintf(out, "draining targets %v: %d moves to go\n", ids, len(p.InFlight)+p.ToGo)
			if !wait {
				return nil
			}
			return waitMoves(ctx, c, out, p, func(p sdk.MoveProgress) bool {
				for _, id := range ids {
					if !slices.Contains(p.Drained, id) {
						return false
					}
				}
				return true
			}, fmt.Sprintf("targets %v drained: safe to stop", ids))
		}}
	cf.add(cmd)
	cmd.Flags().StringSliceVar(&nodes, "node", nil, "a storage node's id (repeat or comma-separate for more)")
	cmd.Flags().UintSliceVar(&targets, "target", nil, "a target's id (repeat or comma-separate for more)")
	if op == drainOn {
		cmd.Flags().BoolVar(&wait, "wait", false, "show progress until every named target is in no chain")
	}
	return cmd
}

// newRebalanceCmd is `sluice admin rebalance`.
func newRebalanceCmd() *cobra.Command {
	var cf connFlags
	var wait, stop bool
	cmd := &cobra.Command{Use: "rebalance [--wait | --stop]", Short: "Move replicas until every live target holds within one of the mean number of chains",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			p, err := c.Rebalance(ctx, stop)
			if err != nil {
				return err
			}
			if stop {
				fmt.Fprintf(out, "rebalance stopped: %d moves in flight finish\n", len(p.InFlight))
				return nil
			}
			fmt.Fprintf(out, "rebalance on: %d moves to go\n", len(p.InFlight)+p.ToGo)
			if !wait {
				return nil
			}
			return waitMoves(ctx, c, out, p, func(p sdk.MoveProgress) bool { return !p.Rebalance && len(p.InFlight) == 0 }, "rebalance done")
		}}
	cf.add(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "show progress until the rebalance is done")
	cmd.Flags().BoolVar(&stop, "stop", false, "end a rebalance (moves in flight finish)")
	return cmd
}

// waitMoves shows the moves' progress until done says so: a bar redrawn
// in place on a terminal, else a line at each change.
func waitMoves(ctx context.Context, c *sdk.Client, out io.Writer, start sdk.MoveProgress, done func(sdk.MoveProgress) bool, doneMsg string) error {
	tty := false
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	last := ""
	for p := start; ; {
		line := progressLine(p, start, tty)
		switch {
		case tty:
			fmt.Fprintf(out, "\r%s", line)
		case line != last:
			fmt.Fprintln(out, line)
		}
		last = line
		if done(p) {
			if tty {
				fmt.Fprintln(out)
			}
			fmt.Fprintln(out, doneMsg)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		next, err := c.Moves(ctx)
		if err != nil {
			fmt.Fprintf(out, "\n%v (retrying)\n", err) // a leader change: ask again
			continue
		}
		p = next
	}
}

// progressLine is "moves D/T done, I in flight[, C cancelled]", with a bar
// in front on a terminal.
func progressLine(p, start sdk.MoveProgress, tty bool) string {
	done := int(p.Done - start.Done)
	total := done + len(p.InFlight) + p.ToGo
	line := fmt.Sprintf("moves %d/%d done, %d in flight", done, total, len(p.InFlight))
	if n := p.Cancelled - start.Cancelled; n > 0 {
		line += fmt.Sprintf(", %d cancelled", n)
	}
	if !tty {
		return line
	}
	const width = 30
	fill := width
	if total > 0 {
		fill = width * done / total
	}
	return "[" + strings.Repeat("#", fill) + strings.Repeat(".", width-fill) + "] " + line
}
