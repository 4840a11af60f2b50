package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newClusterCmd is `sluice cluster`: tools for a whole cluster's spec.
func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Work with a cluster spec: the whole cluster described once"}
	cmd.AddCommand(newClusterCheckCmd())
	return cmd
}

// newClusterCheckCmd is `sluice cluster check --spec FILE`: one line per
// problem, and a non-zero exit when there is one.
func newClusterCheckCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "check --spec FILE",
		Short: "Check a cluster spec: one line per problem, exit status 1 when there are any",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := loadSpec(spec)
			if err != nil {
				return err
			}
			ps := s.problems(true)
			for _, p := range ps {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			if len(ps) > 0 {
				return fmt.Errorf("spec %s: %d problem(s)", spec, len(ps))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d meta, %d storage nodes, %d targets\n", len(s.Meta), len(s.Storage), s.targets())
			return nil
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "the cluster's spec (YAML or JSON)")
	cmd.MarkFlagRequired("spec")
	return cmd
}
