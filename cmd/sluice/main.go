// Command sluice is Sluice's command line: the embedded cluster, servers,
// file and dataset tools, benchmarks and administration, one file per
// subcommand.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var lf logFlags
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice: a distributed file system and dataset loader for ML training",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			l, err := lf.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			slog.SetDefault(l)
			return nil
		},
	}
	lf.add(root)
	root.AddCommand(newVersionCmd(), newBenchCmd(), newDevCmd(), newDemoCmd(), newServerCmd(), newDatasetCmd(), newMountCmd(), newAgentCmd(), newTopCmd(), newFlightCmd(), newClusterCmd(), newAdminCmd())
	root.AddCommand(newFileCmds()...)
	return root
}
