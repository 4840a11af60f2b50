package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/sluicefs/sluice/sdk"
)

// arrowFiles imports Parquet or Arrow IPC files through Arrow record batches.
func (im *importer) arrowFiles(format string, files []string) error {
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		err = readArrowFile(im.ctx, format, p, func(rec arrow.RecordBatch) error { return im.record(format, p, rec) })
		if err != nil {
			return err
		}
		im.progress(st.Size())
	}
	return nil
}

// record adds a record batch's rows as samples, making the dataset with its
// schema on the first one; every later batch must have the same columns.
// src names the input in errors.
func (im *importer) record(format, src string, rec arrow.RecordBatch) error {
	if im.w == nil {
		cols, err := columnsOf(rec.Schema())
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := im.create(cols, nil, format); err != nil {
			return err
		}
	} else if !sameColumns(im.w.m.Columns, rec.Schema()) {
		return fmt.Errorf("%s: schema %v differs from the first batch's", src, rec.Schema())
	}
	vals := make([]any, rec.NumCols())
	for r := 0; r < int(rec.NumRows()); r++ {
		for c := range vals {
			v, err := arrowValue(rec.Column(c), r)
			if err != nil {
				return fmt.Errorf("%s: row %d column %s: %w", src, r, rec.ColumnName(c), err)
			}
			vals[c] = v
		}
		if err := im.w.Add(vals...); err != nil {
			return err
		}
	}
	return nil
}

// ImportStream makes dataset name from a stream of record batches (an
// Arrow IPC stream, an Arrow Flight DoPut), through the same writer and
// column rules as the arrow importer. source names the stream in the
// manifest and in errors. The dataset appears only if the whole stream
// is read; on any error nothing is left behind.
func ImportStream(ctx context.Context, c *sdk.Client, r array.RecordReader, source, name string, opts ImportOptions) (*Manifest, error) {
	im := &importer{ctx: ctx, c: c, name: name, opts: opts}
	var err error
	for err == nil && r.Next() {
		err = im.record("arrow", source, r.RecordBatch())
	}
	if err == nil {
		if err = r.Err(); errors.Is(err, io.EOF) {
			err = nil
		}
	}
	return im.finish(source, "arrow", err)
}

// readArrowFile calls fn with each record batch of file p: Parquet (see
// parquetRecords), or an Arrow IPC file or stream.
func readArrowFile(ctx context.Context, format, p string, fn func(arrow.RecordBatch) error) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var rr array.RecordReader
	switch format {
	case "parquet":
		r, closeParquet, err := parquetRecords(ctx, f, p)
		if err != nil {
			return err
		}
		defer closeParquet()
		rr = r
	default:
		if fr, err := ipc.NewFileReader(f); err == nil {
			defer fr.Close()
			for i := 0; i < fr.NumRecords(); i++ {
				rec, err := fr.RecordBatch(i)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				if err := fn(rec); err != nil {
					return err
				}
			}
			return nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		r, err := ipc.NewReader(f)
		if err != nil {
			return fmt.Errorf("%s: neither an Arrow IPC file nor a stream: %w", p, err)
		}
		rr = r
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

var fromArrow = map[arrow.Type]Type{
	arrow.BINARY: Binary, arrow.LARGE_BINARY: Binary, arrow.STRING: String, arrow.LARGE_STRING: String,
	arrow.INT8: Int8, arrow.INT16: Int16, arrow.INT32: Int32, arrow.INT64: Int64,
	arrow.UINT8: Uint8, arrow.UINT16: Uint16, arrow.UINT32: Uint32, arrow.UINT64: Uint64,
	arrow.FLOAT32: Float32, arrow.FLOAT64: Float64,
}

// typeOf is the column type an Arrow type imports as.
func typeOf(dt arrow.DataType) (Type, bool) {
	if t, ok := fromArrow[dt.ID()]; ok {
		return t, true
	}
	var t Type
	switch x := dt.(type) {
	case *arrow.FixedSizeBinaryType:
		t = FixedSizeBinary(x.ByteWidth)
	case *arrow.FixedSizeListType:
		t = FixedSizeList(fromArrow[x.Elem().ID()], int(x.Len()))
	case *arrow.ListType:
		t = List(fromArrow[x.Elem().ID()])
	case *arrow.LargeListType:
		t = LargeList(fromArrow[x.Elem().ID()])
	default:
		return "", false
	}
	_, err := t.layout() // numeric elements only
	return t, err == nil
}

func columnsOf(s *arrow.Schema) ([]Column, error) {
	var cols []Column
	for _, f := range s.Fields() {
		t, ok := typeOf(f.Type)
		if !ok {
			return nil, fmt.Errorf("column %s has type %s; supported: binary, string, integers, floats, fixed_size_binary, and fixed_size_list, list and large_list of integers or floats", f.Name, f.Type)
		}
		cols = append(cols, Column{f.Name, t})
	}
	return cols, nil
}

func sameColumns(cols []Column, s *arrow.Schema) bool {
	got, err := columnsOf(s)
	return err == nil && slices.Equal(got, cols)
}

func arrowValue(col arrow.Array, r int) (any, error) {
	if col.IsNull(r) {
		return nil, fmt.Errorf("null (nulls are not supported)")
	}
	switch a := col.(type) {
	case *array.Binary:
		return a.Value(r), nil
	case *array.LargeBinary:
		return a.Value(r), nil
	case *array.String:
		return a.Value(r), nil
	case *array.LargeString:
		return a.Value(r), nil
	case *array.Int8:
		return a.Value(r), nil
	case *array.Int16:
		return a.Value(r), nil
	case *array.Int32:
		return a.Value(r), nil
	case *array.Int64:
		return a.Value(r), nil
	case *array.Uint8:
		return a.Value(r), nil
	case *array.Uint16:
		return a.Value(r), nil
	case *array.Uint32:
		return a.Value(r), nil
	case *array.Uint64:
		return a.Value(r), nil
	case *array.Float32:
		return a.Value(r), nil
	case *array.Float64:
		return a.Value(r), nil
	case *array.FixedSizeBinary:
		return a.Value(r), nil
	case *array.FixedSizeList, *array.List, *array.LargeList:
		l := a.(array.ListLike)
		start, end := l.ValueOffsets(r)
		vals := l.ListValues()
		if vals.NullN() > 0 {
			for i := start; i < end; i++ {
				if vals.IsNull(int(i)) {
					return nil, fmt.Errorf("null element %d (nulls are not supported)", i-start)
				}
			}
		}
		return elementRange(vals, start, end), nil
	}
	return nil, fmt.Errorf("type %s not supported", col.DataType())
}
