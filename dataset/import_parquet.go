package dataset

import (
	"context"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetRecords reads Parquet file f (path p) as Arrow record batches;
// closeParquet releases the Parquet reader, once the batches are done with.
// The records go through the Arrow importer (arrowFiles).
func parquetRecords(ctx context.Context, f *os.File, p string) (rr array.RecordReader, closeParquet func() error, err error) {
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	r, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		pf.Close()
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	return r, pf.Close, nil
}
