package dataset

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetRecords reads Parquet file f (path p) as Arrow record batches;
// closeParquet releases the Parquet reader, once the batches are done with.
// The records go through the Arrow importer (arrowFiles).
func parquetRecords(ctx context.Context, f *os.File, p string) (rr array.RecordReader, closeParquet func() error, err error) {
	// arrow-go caps a page at 64 MiB compressed and 256 MiB uncompressed
	// by default, so files of large blobs that other writers (pyarrow)
	// write and read back fail. Accept any page the file can hold: a page
	// header's sizes are int32, and a compressed page lies within the file.
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.MaxUncompressedPageSize = math.MaxInt32
	props.MaxCompressedPageSize = math.MaxInt32
	if st, err := f.Stat(); err == nil {
		props.MaxCompressedPageSize = max(parquet.DefaultMaxCompressedPageSize, min(st.Size(), math.MaxInt32))
	}
	pf, err := file.NewParquetReader(f, file.WithReadProps(props))
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
