package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/sdk"
)

// connFlags are the cluster flags every file command takes; empty values
// come from SLUICE_CLUSTER and SLUICE_TOKEN.
type connFlags struct{ cluster, token string }

func (f *connFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cluster, "cluster", "", "control plane address (default $SLUICE_CLUSTER)")
	cmd.Flags().StringVar(&f.token, "token", "", "cluster token (default $SLUICE_TOKEN)")
}

// tokenOrEnv is the token the client uses: --token, else $SLUICE_TOKEN.
func (f *connFlags) tokenOrEnv() string {
	if f.token != "" {
		return f.token
	}
	return os.Getenv("SLUICE_TOKEN")
}

func (f *connFlags) connect(ctx context.Context) (*sdk.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return sdk.Connect(ctx, sdk.Config{Cluster: f.cluster, Token: f.token})
}

// remotePath strips the "sluice:" prefix that names a path in Sluice.
func remotePath(p string) (string, bool) {
	return strings.CutPrefix(p, "sluice:")
}

func newFileCmds() []*cobra.Command {
	var cf connFlags
	simple := func(use, short string, n int, run func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error) *cobra.Command {
		cmd := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(n),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := cf.connect(cmd.Context())
				if err != nil {
					return err
				}
				defer c.Close()
				for i, a := range args {
					args[i], _ = remotePath(a)
				}
				return run(cmd.Context(), c, cmd.OutOrStdout(), args)
			}}
		cf.add(cmd)
		return cmd
	}
	ls := simple("ls PATH", "List a directory in Sluice", 1, func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
		ents, err := c.ReadDir(ctx, args[0])
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, e := range ents {
			kind := "file"
			switch e.Type() {
			case fs.ModeDir:
				kind = "dir"
			case fs.ModeSymlink:
				kind = "link"
			}
			fmt.Fprintf(tw, "%s\t%s\n", kind, e.Name())
		}
		return tw.Flush()
	})
	mkdir := simple("mkdir PATH", "Make a directory in Sluice", 1, func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
		return c.Mkdir(ctx, args[0], 0o755)
	})
	rm := simple("rm PATH", "Remove a file or an empty directory in Sluice", 1, func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
		return c.Remove(ctx, args[0])
	})
	cat := simple("cat PATH", "Print a file in Sluice", 1, func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
		f, err := c.Open(ctx, args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(out, io.NewSectionReader(f, 0, f.Size()))
		return err
	})
	var asJSON bool
	status := &cobra.Command{Use: "status", Short: "Show the cluster: metadata group, space, every target (state, chains, full, disk) and chain", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.ClusterStatus(cmd.Context())
			if err != nil {
				return err
			}
			if !asJSON {
				writeStatus(cmd.OutOrStdout(), st)
				return nil
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}}
	cf.add(status)
	status.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON (sdk.ClusterStatus), byte counts unrounded")
	return []*cobra.Command{ls, mkdir, rm, cat, status, newCpCmd()}
}

func newCpCmd() *cobra.Command {
	var cf connFlags
	var quiet bool
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy between local files and Sluice (a path in Sluice is written sluice:/path)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, srcRemote := remotePath(args[0])
			dst, dstRemote := remotePath(args[1])
			if srcRemote == dstRemote {
				return fmt.Errorf("cp: exactly one of SRC and DST must be sluice:/path")
			}
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			var r io.ReaderAt
			var size int64
			var w io.WriterAt
			var closeW func() error
			if srcRemote {
				f, err := c.Open(ctx, src)
				if err != nil {
					return err
				}
				defer f.Close()
				r, size = f, f.Size()
				out, err := os.Create(dst)
				if err != nil {
					return err
				}
				w, closeW = out, out.Close
			} else {
				in, err := os.Open(src)
				if err != nil {
					return err
				}
				defer in.Close()
				st, _ := in.Stat()
				r, size = in, st.Size()
				f, err := c.Create(ctx, dst)
				if err != nil {
					return err
				}
				w, closeW = f, f.Close
			}
			err = copyAt(w, r, size, progress(cmd.ErrOrStderr(), size, quiet))
			if cerr := closeW(); err == nil {
				err = cerr
			}
			return err
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// copyAt copies size bytes from r to w in 4 MiB pieces, reporting progress.
func copyAt(w io.WriterAt, r io.ReaderAt, size int64, report func(done int64)) error {
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n > 0 {
			if _, werr := w.WriteAt(buf[:n], off); werr != nil {
				return werr
			}
			off += int64(n)
			report(off)
		}
		if err != nil && err != io.EOF {
			return err
		}
		if n == 0 {
			return fmt.Errorf("cp: source ended at %d of %d bytes", off, size)
		}
	}
	return nil
}

// progress draws a bar on w for transfers of 8 MiB or more.
func progress(w io.Writer, size int64, quiet bool) func(int64) {
	if quiet || size < 8<<20 {
		return func(int64) {}
	}
	start := time.Now()
	return func(done int64) {
		const width = 30
		filled := int(done * width / size)
		mbs := float64(done) / 1e6 / max(time.Since(start).Seconds(), 1e-3)
		fmt.Fprintf(w, "\r[%s%s] %5.1f%% %7.1f MB/s", strings.Repeat("#", filled), strings.Repeat(" ", width-filled), float64(done)*100/float64(size), mbs)
		if done == size {
			fmt.Fprintln(w)
		}
	}
}
