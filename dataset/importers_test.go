package dataset

import (
	"archive/tar"
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
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// takeAll opens dataset name and returns all its rows.
func takeAll(t *testing.T, name string) (*Dataset, arrow.RecordBatch) {
	t.Helper()
	d, err := Open(context.Background(), client(t), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	idx := make([]int64, d.Len())
	for i := range idx {
		idx[i] = int64(i)
	}
	rec, err := d.Take(context.Background(), idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	if err := d.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return d, rec
}

func col(rec arrow.RecordBatch, name string) arrow.Array {
	for i, f := range rec.Schema().Fields() {
		if f.Name == name {
			return rec.Column(i)
		}
	}
	return nil
}

func TestImportFolder(t *testing.T) {
	src := t.TempDir()
	want := map[string][]byte{}
	for _, class := range []string{"cat", "dog", "eel"} {
		os.MkdirAll(filepath.Join(src, class, "sub"), 0o755)
		for i := 0; i < 4; i++ {
			rel := fmt.Sprintf("%s/%d.jpg", class, i)
			if i == 3 {
				rel = class + "/sub/deep.jpg"
			}
			b := fabrictest.RandBytes(uint64(len(want)), 100*len(want))
			os.WriteFile(filepath.Join(src, rel), b, 0o644)
			want[rel] = b
		}
	}
	var last int64
	m, err := Import(context.Background(), client(t), "folder", src, "imp-folder", ImportOptions{Progress: func(done, total int64) { last = done }})
	if err != nil {
		t.Fatal(err)
	}
	if m.Samples != 12 || strings.Join(m.Classes, ",") != "cat,dog,eel" || last == 0 {
		t.Fatalf("manifest: %d samples, classes %v, progress %d", m.Samples, m.Classes, last)
	}
	_, rec := takeAll(t, "imp-folder")
	for r := 0; r < int(rec.NumRows()); r++ {
		p := col(rec, "path").(*array.String).Value(r)
		label := col(rec, "label").(*array.Int64).Value(r)
		if !bytes.Equal(col(rec, "data").(*array.Binary).Value(r), want[p]) {
			t.Fatalf("%s: bytes differ", p)
		}
		if m.Classes[label] != strings.Split(p, "/")[0] {
			t.Fatalf("%s: label %d (%s)", p, label, m.Classes[label])
		}
	}
}

func TestImportJSONL(t *testing.T) {
	src := filepath.Join(t.TempDir(), "x.jsonl")
	var lines []string
	for i := 0; i < 50; i++ {
		lines = append(lines, fmt.Sprintf(`{"text": "line %d \u00e9", "n": %d, "x": %d.5, "ok": %v, "tags": ["a", %d]}`, i, i*3, i, i%2 == 0, i))
	}
	os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	m, err := Import(context.Background(), client(t), "jsonl", src, "imp-jsonl", ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Column{{"text", String}, {"n", Int64}, {"x", Float64}, {"ok", Uint8}, {"tags", String}}
	if fmt.Sprint(m.Columns) != fmt.Sprint(want) {
		t.Fatalf("schema %v, want %v", m.Columns, want)
	}
	_, rec := takeAll(t, "imp-jsonl")
	for i := 0; i < 50; i++ {
		if got := col(rec, "text").(*array.String).Value(i); got != fmt.Sprintf("line %d é", i) {
			t.Fatalf("row %d text %q", i, got)
		}
		if col(rec, "n").(*array.Int64).Value(i) != int64(i*3) || col(rec, "x").(*array.Float64).Value(i) != float64(i)+0.5 {
			t.Fatalf("row %d numbers differ", i)
		}
		if ok := col(rec, "ok").(*array.Uint8).Value(i); ok != map[bool]uint8{true: 1, false: 0}[i%2 == 0] {
			t.Fatalf("row %d ok %d", i, ok)
		}
		if tags := col(rec, "tags").(*array.String).Value(i); tags != fmt.Sprintf(`["a", %d]`, i) {
			t.Fatalf("row %d tags %q", i, tags)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte("{\"a\": 1}\n{\"a\": null}\n"), 0o644)
	if _, err := Import(context.Background(), client(t), "jsonl", bad, "imp-bad", ImportOptions{}); err == nil || !strings.Contains(err.Error(), "bad.jsonl:2") {
		t.Fatalf("null value: %v", err)
	}
}

// arrowTable builds a small table of every supported kind.
func arrowTable(t *testing.T, n int) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{{Name: "img", Type: arrow.BinaryTypes.Binary}, {Name: "caption", Type: arrow.BinaryTypes.String},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32}, {Name: "w", Type: arrow.PrimitiveTypes.Float64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.BinaryBuilder).Append(fabrictest.RandBytes(uint64(i), i*10))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("caption %d", i))
		b.Field(2).(*array.Int32Builder).Append(int32(i % 7))
		b.Field(3).(*array.Float64Builder).Append(float64(i) / 3)
	}
	return b.NewRecordBatch()
}

func checkTable(t *testing.T, name string, n int) {
	t.Helper()
	d, rec := takeAll(t, name)
	if d.Len() != int64(n) {
		t.Fatalf("%d samples, want %d", d.Len(), n)
	}
	for i := 0; i < n; i++ {
		if !bytes.Equal(col(rec, "img").(*array.Binary).Value(i), fabrictest.RandBytes(uint64(i), i*10)) ||
			col(rec, "caption").(*array.String).Value(i) != fmt.Sprintf("caption %d", i) ||
			col(rec, "label").(*array.Int32).Value(i) != int32(i%7) || col(rec, "w").(*array.Float64).Value(i) != float64(i)/3 {
			t.Fatalf("row %d differs", i)
		}
	}
}

func TestImportParquetAndArrow(t *testing.T) {
	rec := arrowTable(t, 300)
	defer rec.Release()
	dir := t.TempDir()
	pq, _ := os.Create(filepath.Join(dir, "t.parquet"))
	tbl := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
	if err := pqarrow.WriteTable(tbl, pq, 100, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	tbl.Release()
	pq.Close()
	if _, err := Import(context.Background(), client(t), "parquet", pq.Name(), "imp-parquet", ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	checkTable(t, "imp-parquet", 300)

	af, _ := os.Create(filepath.Join(dir, "t.arrow"))
	fw, err := ipc.NewFileWriter(af, ipc.WithSchema(rec.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []arrow.RecordBatch{rec.NewSlice(0, 120), rec.NewSlice(120, 300)} {
		if err := fw.Write(part); err != nil {
			t.Fatal(err)
		}
		part.Release()
	}
	fw.Close()
	af.Close()
	if _, err := Import(context.Background(), client(t), "arrow", af.Name(), "imp-arrow", ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	checkTable(t, "imp-arrow", 300)
}

func TestImportWebDataset(t *testing.T) {
	dir := t.TempDir()
	type sample struct{ jpg, cls []byte }
	want := map[string]sample{}
	for shard := 0; shard < 2; shard++ {
		f, _ := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%d.tar", shard)))
		tw := tar.NewWriter(f)
		for i := 0; i < 20; i++ {
			key := fmt.Sprintf("part%d/%05d", shard, i)
			s := sample{fabrictest.RandBytes(uint64(shard*100+i), 500+i), []byte(fmt.Sprint(i % 5))}
			want[key] = s
			for ext, b := range map[string][]byte{"jpg": s.jpg, "cls": s.cls} {
				tw.WriteHeader(&tar.Header{Name: key + "." + ext, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
				tw.Write(b)
			}
		}
		tw.Close()
		f.Close()
	}
	m, err := Import(context.Background(), client(t), "webdataset", dir, "imp-wds", ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Samples != 40 {
		t.Fatalf("%d samples", m.Samples)
	}
	_, rec := takeAll(t, "imp-wds")
	for r := 0; r < 40; r++ {
		key := col(rec, "__key__").(*array.String).Value(r)
		s, ok := want[key]
		if !ok || !bytes.Equal(col(rec, "jpg").(*array.Binary).Value(r), s.jpg) || !bytes.Equal(col(rec, "cls").(*array.Binary).Value(r), s.cls) {
			t.Fatalf("sample %q differs", key)
		}
	}
}

func TestImportRejectsBadInput(t *testing.T) {
	cl := client(t)
	ctx := context.Background()
	if _, err := Import(ctx, cl, "csv", t.TempDir(), "x", ImportOptions{}); err == nil {
		t.Fatal("unknown format accepted")
	}
	if _, err := Import(ctx, cl, "jsonl", "/nonexistent", "x", ImportOptions{}); err == nil {
		t.Fatal("missing input accepted")
	}
	if _, err := Import(ctx, cl, "folder", t.TempDir(), "x", ImportOptions{}); err == nil {
		t.Fatal("an empty folder was imported")
	}
	notParquet := filepath.Join(t.TempDir(), "x.parquet")
	os.WriteFile(notParquet, []byte("hello"), 0o644)
	if _, err := Import(ctx, cl, "parquet", notParquet, "x", ImportOptions{}); err == nil {
		t.Fatal("a non-parquet file was imported")
	}
	if _, err := Open(ctx, cl, "x"); err == nil {
		t.Fatal("a failed import left a dataset behind")
	}
}
