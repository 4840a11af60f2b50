package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/sdk"
)

func newDatasetCmd() *cobra.Command {
	root := &cobra.Command{Use: "dataset", Short: "Import, inspect, verify, list and remove datasets"}
	var cf connFlags
	with := func(cmd *cobra.Command, run func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error) *cobra.Command {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			return run(cmd.Context(), c, cmd.OutOrStdout(), args)
		}
		cf.add(cmd)
		return cmd
	}

	var format string
	var shardMiB int64
	var quiet bool
	var imp *cobra.Command
	imp = with(&cobra.Command{Use: "import --format F SRC NAME", Short: "Import SRC (a file or directory) as dataset NAME",
		Long: "Formats: " + strings.Join(dataset.Formats, ", ") + ". See the dataset package for each one's columns. " +
			"SRC - reads an Arrow IPC stream from standard input (--format arrow).",
		Args: cobra.ExactArgs(2)},
		func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			var bar func(int64)
			if args[0] == "-" {
				return importStdin(ctx, c, format, args[1], shardMiB, imp.InOrStdin(), out)
			}
			m, err := dataset.Import(ctx, c, format, args[0], args[1], dataset.ImportOptions{ShardBytes: shardMiB << 20,
				Progress: func(done, total int64) {
					if bar == nil {
						bar = progress(out, total, quiet)
					}
					bar(done)
				}})
			if err != nil {
				return err
			}
			printImported(out, m)
			return nil
		})
	imp.Flags().StringVar(&format, "format", "", "input format: "+strings.Join(dataset.Formats, ", "))
	imp.Flags().Int64Var(&shardMiB, "shard-mib", 256, "shard file size in MiB")
	imp.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	imp.MarkFlagRequired("format")

	var rows int
	inspect := with(&cobra.Command{Use: "inspect NAME", Short: "Show a dataset's schema, counts, size and first samples", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			d, err := dataset.Open(ctx, c, args[0])
			if err != nil {
				return err
			}
			defer d.Close()
			return inspectDataset(ctx, out, d, rows)
		})
	inspect.Flags().IntVar(&rows, "rows", 3, "samples to preview")

	verify := with(&cobra.Command{Use: "verify NAME", Short: "Read every sample and check its checksum", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			d, err := dataset.Open(ctx, c, args[0])
			if err != nil {
				return err
			}
			defer d.Close()
			bar := progress(out, d.Len(), d.Manifest().Bytes() < 8<<20)
			if err := d.Verify(ctx, bar); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: %d samples, every checksum matches\n", d.Manifest().Name, d.Len())
			return nil
		})

	ls := with(&cobra.Command{Use: "ls", Short: "List datasets", Args: cobra.NoArgs},
		func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			ents, err := c.ReadDir(ctx, "/datasets")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSAMPLES\tMiB\tCOLUMNS")
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					continue // an import in progress or abandoned
				}
				d, err := dataset.Open(ctx, c, e.Name())
				if err != nil {
					fmt.Fprintf(tw, "%s\t?\t?\t%v\n", e.Name(), err)
					continue
				}
				m := d.Manifest()
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\n", m.Name, m.Samples, float64(m.Bytes())/(1<<20), len(m.Columns))
				d.Close()
			}
			return tw.Flush()
		})

	rm := with(&cobra.Command{Use: "rm NAME", Short: "Remove a dataset", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			return dataset.Remove(ctx, c, args[0])
		})
	withDataset := func(cmd *cobra.Command, run func(ctx context.Context, d *dataset.Dataset, out io.Writer) error) *cobra.Command {
		return with(cmd, func(ctx context.Context, c *sdk.Client, out io.Writer, args []string) error {
			d, err := dataset.Open(ctx, c, args[0])
			if err != nil {
				return err
			}
			defer d.Close()
			return run(ctx, d, out)
		})
	}
	var oc dataset.LoaderConfig
	order := withDataset(&cobra.Command{Use: "order NAME", Short: "Print the sample indices of each batch a rank gets in an epoch, one JSON list per line",
		Args: cobra.ExactArgs(1)},
		func(ctx context.Context, d *dataset.Dataset, out io.Writer) error { return printOrder(ctx, out, d, oc) })
	addLoaderFlags(order, &oc, 32, true)
	var cc dataset.LoaderConfig
	var catFormat string
	cat := withDataset(&cobra.Command{Use: "cat NAME [loader options] --format arrow|parquet",
		Short: "Write a rank's epoch of batches, in loader order, to standard output as an Arrow IPC stream or a Parquet file",
		Long: `Writes the batches the loader gives (--rank of --world-size, shuffled with
--shuffle) to standard output: --format arrow an Arrow IPC stream, one record
batch per loader batch; --format parquet a Parquet file, one row group per
batch. For pipelines: sluice dataset cat NAME --format arrow | duckdb, or
| python -c 'import pyarrow as pa, sys; pa.ipc.open_stream(sys.stdin.buffer)'.`,
		Args: cobra.ExactArgs(1)},
		func(ctx context.Context, d *dataset.Dataset, out io.Writer) error {
			return catDataset(ctx, out, d, cc, catFormat)
		})
	addLoaderFlags(cat, &cc, 1024, false)
	cat.Flags().StringSliceVar(&cc.Columns, "columns", nil, "columns to write (default all)")
	cat.Flags().StringVar(&cc.IndexColumn, "index-column", "", "add an int64 column of this name holding each row's sample index")
	cat.Flags().StringVar(&catFormat, "format", "arrow", "output format: arrow (IPC stream) or parquet")
	var bc dataset.LoaderConfig
	var epochs int
	var check bool
	bench := withDataset(&cobra.Command{Use: "bench NAME", Short: "Run shuffled epochs through the loader and print batches/s, samples/s and MB/s as JSON",
		Args: cobra.ExactArgs(1)},
		func(ctx context.Context, d *dataset.Dataset, out io.Writer) error {
			return benchLoader(ctx, out, d, bc, epochs, check)
		})
	bench.Flags().IntVar(&bc.BatchSize, "batch-size", 256, "samples per batch")
	bench.Flags().IntVar(&epochs, "epochs", 2, "epochs")
	bench.Flags().Uint64Var(&bc.Seed, "seed", 0, "shuffle seed")
	bench.Flags().IntVar(&bc.Readers, "readers", 4, "batches read in parallel")
	bench.Flags().StringVar(&bc.Agent, "agent", "", "read through the local agent at this socket (shared-memory rings) instead of from storage directly")
	bench.Flags().BoolVar(&check, "check", false, "check every sample comes once per epoch and report byte_sum, the sum of every byte of the binary columns (what a consumer that touches each byte pays)")
	root.AddCommand(imp, inspect, verify, ls, rm, order, cat, bench)
	return root
}

// addLoaderFlags adds the flags that choose a rank's batches of an epoch.
func addLoaderFlags(cmd *cobra.Command, cfg *dataset.LoaderConfig, batch int, shuffle bool) {
	cmd.Flags().IntVar(&cfg.BatchSize, "batch-size", batch, "samples per batch")
	cmd.Flags().BoolVar(&cfg.Shuffle, "shuffle", shuffle, "shuffle")
	cmd.Flags().Uint64Var(&cfg.Seed, "seed", 0, "shuffle seed")
	cmd.Flags().Int64Var(&cfg.Epoch, "epoch", 0, "epoch")
	cmd.Flags().IntVar(&cfg.Rank, "rank", 0, "rank")
	cmd.Flags().IntVar(&cfg.WorldSize, "world-size", 1, "world size")
	cmd.Flags().BoolVar(&cfg.DropLast, "drop-last", false, "drop the final partial step")
}

func inspectDataset(ctx context.Context, out io.Writer, d *dataset.Dataset, rows int) error {
	m := d.Manifest()
	fmt.Fprintf(out, "dataset  %s (format %d)\nsamples  %d\nshards   %d, %.1f MiB\nhash     %s\n", m.Name, m.Version, m.Samples, len(m.Shards), float64(m.Bytes())/(1<<20), m.Hash)
	if m.Source != "" {
		fmt.Fprintf(out, "source   %s\n", m.Source)
	}
	if len(m.Classes) > 0 {
		fmt.Fprintf(out, "classes  %d: %s\n", len(m.Classes), preview(strings.Join(m.Classes, ", "), 60))
	}
	fmt.Fprintln(out, "columns:")
	for _, c := range m.Columns {
		fmt.Fprintf(out, "  %-20s %s\n", c.Name, c.Type)
	}
	rows = min(rows, int(m.Samples))
	if rows <= 0 {
		return nil
	}
	idx := make([]int64, rows)
	for i := range idx {
		idx[i] = int64(i)
	}
	rec, err := d.Take(ctx, idx)
	if err != nil {
		return err
	}
	defer rec.Release()
	for r := 0; r < rows; r++ {
		fmt.Fprintf(out, "sample %d:\n", r)
		for c, f := range rec.Schema().Fields() {
			fmt.Fprintf(out, "  %-20s %s\n", f.Name, cell(rec.Column(c), r))
		}
	}
	return nil
}

// cell renders one value for a preview.
func cell(col arrow.Array, r int) string {
	switch a := col.(type) {
	case *array.Binary, *array.FixedSizeBinary:
		b := a.(interface{ Value(int) []byte }).Value(r)
		if utf8.Valid(b) {
			return fmt.Sprintf("%d bytes %q", len(b), preview(string(b), 40))
		}
		return fmt.Sprintf("%d bytes %x", len(b), b[:min(len(b), 16)])
	case *array.String:
		return fmt.Sprintf("%q", preview(a.Value(r), 60))
	case array.ListLike: // tensor columns: the first few elements
		start, end := a.ValueOffsets(r)
		parts := make([]string, 0, 9)
		for i := start; i < min(end, start+8); i++ {
			parts = append(parts, a.ListValues().ValueStr(int(i)))
		}
		if end-start > 8 {
			parts = append(parts, "…")
		}
		return fmt.Sprintf("%d elements [%s]", end-start, strings.Join(parts, " "))
	}
	return col.ValueStr(r)
}

func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// printOrder runs a loader over an epoch, reading only the index column.
func printOrder(ctx context.Context, out io.Writer, d *dataset.Dataset, cfg dataset.LoaderConfig) error {
	cfg.IndexColumn = "__index__"
	cfg.Columns = []string{d.Manifest().Columns[0].Name}
	for _, c := range d.Manifest().Columns { // the smallest column to read
		if c.Type.Width() > 0 {
			cfg.Columns = []string{c.Name}
			break
		}
	}
	l, err := d.Loader(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	return l.Each(ctx, func(b *dataset.Batch) error {
		js, _ := json.Marshal(b.Column(int(b.NumCols()) - 1).(*array.Int64).Int64Values())
		_, err := w.Write(append(js, '\n'))
		return err
	})
}

// benchLoader times epochs of shuffled batches, touching nothing but the
// batches' existence (what a consumer handed zero-copy buffers pays), or
// with check every byte of the binary columns and every sample's index.
func benchLoader(ctx context.Context, out io.Writer, d *dataset.Dataset, cfg dataset.LoaderConfig, epochs int, check bool) error {
	cfg.Shuffle = true
	var seen []int32 // with check: how often each sample came this epoch
	if check {
		cfg.IndexColumn = "__index__"
		seen = make([]int32, d.Manifest().Samples)
	}
	l, err := d.Loader(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	var batches, samples, bytes int64
	var sum uint64
	t0 := time.Now()
	for e := 0; e < epochs; e++ {
		l.SetEpoch(int64(e))
		err := l.Each(ctx, func(b *dataset.Batch) error {
			batches++
			samples += b.NumRows()
			bytes += b.Bytes
			if check {
				for _, i := range b.Column(int(b.NumCols()) - 1).(*array.Int64).Int64Values() {
					seen[i]++
				}
				sum += binarySum(b.RecordBatch)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if check {
			for i, n := range seen {
				if n != 1 {
					return fmt.Errorf("epoch %d delivered sample %d %d times", e, i, n)
				}
				seen[i] = 0
			}
		}
	}
	secs := time.Since(t0).Seconds()
	res := map[string]any{"batches_per_s": float64(batches) / secs, "samples_per_s": float64(samples) / secs,
		"mb_per_s": float64(bytes) / 1e6 / secs, "seconds": secs}
	if check {
		res["byte_sum"] = sum
	}
	return json.NewEncoder(out).Encode(res)
}

// binarySum adds up every value byte of the batch's binary columns.
func binarySum(b arrow.RecordBatch) uint64 {
	var sum uint64
	for _, col := range b.Columns() {
		var vals []byte
		switch a := col.(type) {
		case interface{ ValueBytes() []byte }: // binary and string, offsets applied
			vals = a.ValueBytes()
		case *array.FixedSizeBinary:
			w := a.DataType().(*arrow.FixedSizeBinaryType).ByteWidth
			vals = a.Data().Buffers()[1].Bytes()[a.Offset()*w : (a.Offset()+a.Len())*w]
		}
		sum += byteSum(vals)
	}
	return sum
}

// byteSum adds up b's bytes eight at a time: each 64-bit word's bytes go
// into four 16-bit lanes, which hold the sum of up to 128 words before
// they are folded into the total.
func byteSum(b []byte) uint64 {
	const lanes = 0x00ff00ff00ff00ff
	var sum uint64
	for len(b) >= 8 {
		var acc uint64
		for k := 0; k < 128 && len(b) >= 8; k++ {
			w := binary.LittleEndian.Uint64(b)
			acc += w&lanes + (w>>8)&lanes
			b = b[8:]
		}
		for ; acc != 0; acc >>= 16 {
			sum += acc & 0xffff
		}
	}
	for _, v := range b {
		sum += uint64(v)
	}
	return sum
}
