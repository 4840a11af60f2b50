package dataset

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// tensorColumns are the tensor columns of tensorTable, as imported.
var tensorColumns = []Column{
	{"id", Int64},
	{"digest", FixedSizeBinary(16)},
	{"emb", FixedSizeList(Float32, 8)},
	{"shape", FixedSizeList(Uint16, 3)},
	{"tokens", List(Int64)},
	{"feats", LargeList(Float64)},
}

// The values of row r, by column.
func tensorDigest(r int) []byte {
	b := make([]byte, 16)
	for k := range b {
		b[k] = byte(r*7 + k)
	}
	return b
}
func tensorEmb(r, k int) float32  { return float32(r) + float32(k)/8 }
func tensorShape(r, k int) uint16 { return uint16(r*3 + k) }
func tensorTokens(r int) int      { return r % 5 } // how many
func tensorToken(r, k int) int64  { return int64(r*100 + k) }
func tensorFeats(r int) int       { return (r * 7) % 4 }
func tensorFeat(r, k int) float64 { return float64(r) - float64(k)/4 }

func tensorTable(t *testing.T, n int) arrow.RecordBatch { return tensorRows(t, 0, n) }

// tensorRows is rows [lo, hi) of the tensor table.
func tensorRows(t *testing.T, lo, hi int) arrow.RecordBatch {
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "digest", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}},
		{Name: "emb", Type: arrow.FixedSizeListOf(8, arrow.PrimitiveTypes.Float32)},
		{Name: "shape", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Uint16)},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "feats", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float64)},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for r := lo; r < hi; r++ {
		b.Field(0).(*array.Int64Builder).Append(int64(r))
		b.Field(1).(*array.FixedSizeBinaryBuilder).Append(tensorDigest(r))
		emb := b.Field(2).(*array.FixedSizeListBuilder)
		emb.Append(true)
		for k := 0; k < 8; k++ {
			emb.ValueBuilder().(*array.Float32Builder).Append(tensorEmb(r, k))
		}
		shape := b.Field(3).(*array.FixedSizeListBuilder)
		shape.Append(true)
		for k := 0; k < 3; k++ {
			shape.ValueBuilder().(*array.Uint16Builder).Append(tensorShape(r, k))
		}
		tok := b.Field(4).(*array.ListBuilder)
		tok.Append(true)
		for k := 0; k < tensorTokens(r); k++ {
			tok.ValueBuilder().(*array.Int64Builder).Append(tensorToken(r, k))
		}
		feats := b.Field(5).(*array.LargeListBuilder)
		feats.Append(true)
		for k := 0; k < tensorFeats(r); k++ {
			feats.ValueBuilder().(*array.Float64Builder).Append(tensorFeat(r, k))
		}
	}
	return b.NewRecordBatch()
}

// checkTensorBatch checks every row of a loaded batch against the values
// of the sample its index column names.
func checkTensorBatch(t *testing.T, rec arrow.RecordBatch, idx []int64) {
	t.Helper()
	for i, s := range idx {
		r := int(s)
		if got := col(rec, "id").(*array.Int64).Value(i); got != s {
			t.Fatalf("row %d: id %d, sample %d", i, got, s)
		}
		if got := col(rec, "digest").(*array.FixedSizeBinary).Value(i); !bytes.Equal(got, tensorDigest(r)) {
			t.Fatalf("sample %d: digest %x", s, got)
		}
		emb := col(rec, "emb").(*array.FixedSizeList)
		start, end := emb.ValueOffsets(i)
		if end-start != 8 {
			t.Fatalf("sample %d: emb has %d elements", s, end-start)
		}
		for k := 0; k < 8; k++ {
			if got := emb.ListValues().(*array.Float32).Value(int(start) + k); got != tensorEmb(r, k) {
				t.Fatalf("sample %d: emb[%d] = %v", s, k, got)
			}
		}
		shape := col(rec, "shape").(*array.FixedSizeList)
		start, _ = shape.ValueOffsets(i)
		for k := 0; k < 3; k++ {
			if got := shape.ListValues().(*array.Uint16).Value(int(start) + k); got != tensorShape(r, k) {
				t.Fatalf("sample %d: shape[%d] = %v", s, k, got)
			}
		}
		tok := col(rec, "tokens").(*array.List)
		start, end = tok.ValueOffsets(i)
		if int(end-start) != tensorTokens(r) {
			t.Fatalf("sample %d: %d tokens, want %d", s, end-start, tensorTokens(r))
		}
		for k := 0; k < tensorTokens(r); k++ {
			if got := tok.ListValues().(*array.Int64).Value(int(start) + k); got != tensorToken(r, k) {
				t.Fatalf("sample %d: tokens[%d] = %v", s, k, got)
			}
		}
		feats := col(rec, "feats").(*array.LargeList)
		start, end = feats.ValueOffsets(i)
		if int(end-start) != tensorFeats(r) {
			t.Fatalf("sample %d: %d feats, want %d", s, end-start, tensorFeats(r))
		}
		for k := 0; k < tensorFeats(r); k++ {
			if got := feats.ListValues().(*array.Float64).Value(int(start) + k); got != tensorFeat(r, k) {
				t.Fatalf("sample %d: feats[%d] = %v", s, k, got)
			}
		}
	}
}

// checkTensorDataset checks an imported tensor dataset: its column types,
// that they load as the Arrow types they came from, and every value,
// loaded shuffled.
func checkTensorDataset(t *testing.T, name string, src *arrow.Schema, n int) {
	t.Helper()
	d, _ := takeAll(t, name) // Take and Verify
	if got := fmt.Sprint(d.Manifest().Columns); got != fmt.Sprint(tensorColumns) {
		t.Fatalf("columns %s, want %s", got, fmt.Sprint(tensorColumns))
	}
	for i, f := range d.Schema().Fields() {
		if !arrow.TypeEqual(f.Type, src.Field(i).Type) {
			t.Fatalf("column %s loads as %s, was %s", f.Name, f.Type, src.Field(i).Type)
		}
	}
	l := newLoader(t, d, LoaderConfig{BatchSize: 37, Shuffle: true, Seed: 3})
	seen := map[int64]bool{}
	eachBatch(t, l, func(b *Batch) {
		idx := b.Column(int(b.NumCols()) - 1).(*array.Int64).Int64Values()
		checkTensorBatch(t, b.RecordBatch, idx)
		for _, i := range idx {
			seen[i] = true
		}
		b.Release()
	})
	if len(seen) != n {
		t.Fatalf("%d distinct samples loaded, want %d", len(seen), n)
	}
}

func TestImportTensorColumns(t *testing.T) {
	const n = 300
	rec := tensorTable(t, n)
	defer rec.Release()
	dir := t.TempDir()

	af, _ := os.Create(filepath.Join(dir, "t.arrow"))
	fw, err := ipc.NewFileWriter(af, ipc.WithSchema(rec.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []arrow.RecordBatch{rec.NewSlice(0, 110), rec.NewSlice(110, n)} {
		if err := fw.Write(part); err != nil {
			t.Fatal(err)
		}
		part.Release()
	}
	fw.Close()
	af.Close()
	if _, err := Import(context.Background(), client(t), "arrow", af.Name(), "tensor-arrow", ImportOptions{ShardBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	checkTensorDataset(t, "tensor-arrow", rec.Schema(), n)

	// A row group per batch. Not WriteTable's row group length: arrow-go
	// (v18.8) writes a sliced fixed_size_list's first rows instead of the
	// slice's, so every row group but the first would hold wrong values.
	pq, _ := os.Create(filepath.Join(dir, "t.parquet"))
	pw, err := pqarrow.NewFileWriter(rec.Schema(), pq, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < n; lo += 128 {
		part := tensorRows(t, lo, min(n, lo+128))
		if err := pw.Write(part); err != nil {
			t.Fatal(err)
		}
		part.Release()
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(context.Background(), client(t), "parquet", pq.Name(), "tensor-parquet", ImportOptions{ShardBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	checkTensorDataset(t, "tensor-parquet", rec.Schema(), n)
}

func TestWriterTensorValues(t *testing.T) {
	ctx := context.Background()
	cols := []Column{{"v", FixedSizeList(Float32, 2)}, {"l", List(Int32)}, {"h", FixedSizeBinary(4)}}
	w, err := Create(ctx, client(t), "tensor-writer", cols, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]any{
		{[]float32{1}, []int32{}, []byte("abcd")},          // too few elements
		{[]float64{1, 2}, []int32{}, []byte("abcd")},       // wrong element type
		{[]float32{1, 2}, []byte{1, 2, 3}, []byte("abcd")}, // not whole elements
		{[]float32{1, 2}, []int32{}, []byte("abc")},        // wrong size
		{[]float32{1, 2}, "text", []byte("abcd")},          // a string for a list
	} {
		if err := w.Add(bad...); err == nil {
			t.Fatalf("Add(%v) succeeded", bad)
		}
	}
	if err := w.Add([]float32{1.5, -2}, []int32{7, 8, 9}, []byte("abcd")); err != nil {
		t.Fatal(err)
	}
	if err := w.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}, []int32{}, "wxyz"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, rec := takeAll(t, "tensor-writer")
	v := col(rec, "v").(*array.FixedSizeList).ListValues().(*array.Float32).Float32Values()
	l := col(rec, "l").(*array.List)
	h := col(rec, "h").(*array.FixedSizeBinary)
	if fmt.Sprint(v) != "[1.5 -2 1 2]" || fmt.Sprint(l.ListValues().(*array.Int32).Int32Values()) != "[7 8 9]" ||
		fmt.Sprint(l.Offsets()) != "[0 3 3]" || string(h.Value(0))+string(h.Value(1)) != "abcdwxyz" {
		t.Fatalf("loaded %v, %v %v, %q %q", v, l.ListValues(), l.Offsets(), h.Value(0), h.Value(1))
	}
	for _, bad := range []Type{"list<string>", "fixed_size_list<float32>[0]", "fixed_size_binary[x]", "list<list<int8>>"} {
		if err := checkSchema([]Column{{"x", bad}}); err == nil {
			t.Fatalf("type %q accepted", bad)
		}
	}
}

// TestImportParquetLargePage imports a Parquet file whose one data page is
// over arrow-go's default 64 MiB limit (pyarrow writes such files for
// large blobs and reads them back).
func TestImportParquetLargePage(t *testing.T) {
	const n, size = 520, 128 << 10
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{{Name: "blob", Type: arrow.BinaryTypes.Binary}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	blob := make([]byte, size)
	for r := 0; r < n; r++ {
		for k := range blob {
			blob[k] = byte(r + k*31)
		}
		b.Field(0).(*array.BinaryBuilder).Append(blob)
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "big.parquet")
	f, _ := os.Create(p)
	props := parquet.NewWriterProperties(parquet.WithDataPageSize(1<<30), parquet.WithDictionaryDefault(false),
		parquet.WithCompression(compress.Codecs.Uncompressed), parquet.WithMaxRowGroupLength(n), parquet.WithBatchSize(n))
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	if err := pqarrow.WriteTable(tbl, f, n, props, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	tbl.Release()
	f.Close()
	// The file does hold a page past the default limit.
	f, _ = os.Open(p)
	_, err := pqarrow.ReadTable(context.Background(), f, nil, pqarrow.ArrowReadProperties{}, mem)
	f.Close()
	if err == nil || !strings.Contains(err.Error(), "exceeds configured limit") {
		t.Fatalf("reading with the default limits: %v, want a page over the limit", err)
	}
	if _, err := Import(context.Background(), client(t), "parquet", p, "big-pages", ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := Open(context.Background(), client(t), "big-pages")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != n {
		t.Fatalf("%d samples, want %d", d.Len(), n)
	}
	got, err := d.Take(context.Background(), []int64{0, n - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	for i, r := range []int{0, n - 1} {
		for k := range blob {
			blob[k] = byte(r + k*31)
		}
		if !bytes.Equal(got.Column(0).(*array.Binary).Value(i), blob) {
			t.Fatalf("sample %d differs", r)
		}
	}
}
