package main

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/sdk"
)

// recordWriter is what catDataset writes batches to.
type recordWriter interface {
	Write(arrow.RecordBatch) error
	Close() error
}

// catDataset writes a rank's epoch of batches to out in format (arrow: an
// IPC stream; parquet: a file, a row group per batch).
func catDataset(ctx context.Context, out io.Writer, d *dataset.Dataset, cfg dataset.LoaderConfig, format string) error {
	l, err := d.Loader(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	var w recordWriter
	switch format {
	case "arrow":
		w = ipc.NewWriter(bw, ipc.WithSchema(l.Schema()))
	case "parquet":
		pw, err := pqarrow.NewFileWriter(l.Schema(), bw, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
		if err != nil {
			return fmt.Errorf("cat %s: %w", d.Manifest().Name, err)
		}
		w = pw
	default:
		return fmt.Errorf("cat: unknown --format %q (arrow or parquet)", format)
	}
	if err := l.Each(ctx, func(b *dataset.Batch) error { return w.Write(b.RecordBatch) }); err != nil {
		w.Close()
		return fmt.Errorf("cat %s: %w", d.Manifest().Name, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("cat %s: %w", d.Manifest().Name, err)
	}
	return bw.Flush()
}

// importStdin imports an Arrow IPC stream read from in as dataset name.
func importStdin(ctx context.Context, c *sdk.Client, format, name string, shardMiB int64, in io.Reader, out io.Writer) error {
	if format != "arrow" {
		return fmt.Errorf("import -: standard input must be an Arrow IPC stream (--format arrow), not %s", format)
	}
	r, err := ipc.NewReader(bufio.NewReaderSize(in, 1<<20))
	if err != nil {
		return fmt.Errorf("import -: standard input is not an Arrow IPC stream: %w", err)
	}
	defer r.Release()
	m, err := dataset.ImportStream(ctx, c, r, "stdin", name, dataset.ImportOptions{ShardBytes: shardMiB << 20})
	if err != nil {
		return err
	}
	printImported(out, m)
	return nil
}

func printImported(out io.Writer, m *dataset.Manifest) {
	fmt.Fprintf(out, "imported %s: %d samples, %d shards, %.1f MiB\n", m.Name, m.Samples, len(m.Shards), float64(m.Bytes())/(1<<20))
}
