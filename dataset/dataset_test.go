package dataset

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sluicefs/sluice/sdk"
)

// checkRows checks a record's rows against the generated samples.
func checkRows(t *testing.T, rec arrow.RecordBatch, indices []int64, maxLen int) {
	t.Helper()
	if rec.NumRows() != int64(len(indices)) {
		t.Fatalf("%d rows, want %d", rec.NumRows(), len(indices))
	}
	cols := map[string]arrow.Array{}
	for i, f := range rec.Schema().Fields() {
		cols[f.Name] = rec.Column(i)
	}
	for r, i := range indices {
		data, label, name, score := genSample(7, i, maxLen)
		if c, ok := cols["data"]; ok && !bytes.Equal(c.(*array.Binary).Value(r), data) {
			t.Fatalf("row %d (sample %d): data differs", r, i)
		}
		if c, ok := cols["label"]; ok && c.(*array.Int64).Value(r) != label {
			t.Fatalf("row %d (sample %d): label %d, want %d", r, i, c.(*array.Int64).Value(r), label)
		}
		if c, ok := cols["name"]; ok && c.(*array.String).Value(r) != name {
			t.Fatalf("row %d (sample %d): name %q, want %q", r, i, c.(*array.String).Value(r), name)
		}
		if c, ok := cols["score"]; ok && c.(*array.Float32).Value(r) != score {
			t.Fatalf("row %d (sample %d): score %v, want %v", r, i, c.(*array.Float32).Value(r), score)
		}
	}
}

func TestWriteOpenTakeVerify(t *testing.T) {
	d := makeDataset(t, "take", 3000, 2000, 1<<20) // several shards
	ctx := context.Background()
	if d.Len() != 3000 || len(d.Manifest().Shards) < 2 {
		t.Fatalf("%d samples in %d shards", d.Len(), len(d.Manifest().Shards))
	}
	idx := []int64{2999, 0, 17, 17, 1500, 1, 2048}
	rec, err := d.Take(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rec, idx, 2000)
	rec.Release()
	rec, err = d.Take(ctx, idx, "score", "data") // projection keeps schema order
	if err != nil {
		t.Fatal(err)
	}
	if rec.NumCols() != 2 || rec.ColumnName(0) != "data" || rec.ColumnName(1) != "score" {
		t.Fatalf("projection gave columns %v", rec.Schema())
	}
	checkRows(t, rec, idx, 2000)
	rec.Release()
	if _, err := d.Take(ctx, []int64{3000}); err == nil {
		t.Fatal("take past the end succeeded")
	}
	if _, err := d.Take(ctx, []int64{1}, "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("take of an unknown column: %v", err)
	}
	var last int64
	if err := d.Verify(ctx, func(n int64) { last = n }); err != nil {
		t.Fatal(err)
	}
	if last != 3000 {
		t.Fatalf("verify reported %d samples", last)
	}
}

func TestVerifyFindsCorruption(t *testing.T) {
	d := makeDataset(t, "corrupt", 200, 500, 1<<20)
	ctx := context.Background()
	cl := client(t)
	// Overwrite a byte of sample 100's data in its shard, behind the
	// dataset's back.
	off, n := d.ix.varRange(100, 0)
	if n == 0 {
		t.Fatal("sample 100 is empty; pick another")
	}
	f, err := cl.OpenFile(ctx, Dir(d.m.Name)+"/"+d.m.Shards[d.ix.shardOf(100)].File, true)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _, _ := genSample(7, 100, 500)
	if _, err := f.WriteAt([]byte{^data[0]}, int64(off)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = d.Verify(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "sample 100") {
		t.Fatalf("verify after corruption: %v", err)
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	cl := client(t)
	ctx := context.Background()
	if _, err := Create(ctx, cl, "../x", testColumns, WriterOptions{}); err == nil {
		t.Fatal("a bad name was accepted")
	}
	if _, err := Create(ctx, cl, "x", []Column{{"a", "complex"}}, WriterOptions{}); err == nil {
		t.Fatal("an unknown type was accepted")
	}
	if _, err := Create(ctx, cl, "x", []Column{{"a", Int8}, {"a", Binary}}, WriterOptions{}); err == nil {
		t.Fatal("a repeated column was accepted")
	}
	w, err := Create(ctx, cl, "bad-values", testColumns, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vals := range [][]any{
		{[]byte("x"), int64(1), "n"},                    // too few
		{[]byte("x"), "one", "n", float32(1)},           // wrong type
		{[]byte("x"), int64(1), "\xff", float32(1)},     // not UTF-8
		{[]byte("x"), uint64(1 << 63), "n", float32(1)}, // out of range for int64
		{3, int64(1), "n", float32(1)},                  // binary takes bytes
	} {
		if err := w.Add(vals...); err == nil {
			t.Fatalf("Add(%v) accepted", vals)
		}
	}
	// The refused samples left nothing behind: a good one still goes in.
	data, label, name, score := genSample(7, 0, 10)
	if err := w.Add(data, label, name, score); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(ctx, cl, "bad-values")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Take(ctx, []int64{0})
	if err != nil || d.Len() != 1 {
		t.Fatalf("after refused samples: %d samples, %v", d.Len(), err)
	}
	checkRows(t, rec, []int64{0}, 10)
	rec.Release()
	d.Close()
	if _, err := d.Take(ctx, []int64{0}); err == nil {
		t.Fatal("take from a closed dataset succeeded")
	}
	aborted, err := Create(ctx, cl, "aborted", testColumns, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := aborted.Add(data, label, name, score); err != nil {
		t.Fatal(err)
	}
	aborted.Abort()
	if _, err := Open(ctx, cl, "aborted"); !errors.Is(err, sdk.ErrNotExist) {
		t.Fatalf("an aborted dataset opens: %v", err)
	}
	twice := makeDataset(t, "twice", 3, 10, 0)
	if _, err := Create(ctx, cl, twice.m.Name, testColumns, WriterOptions{}); !errors.Is(err, sdk.ErrExist) {
		t.Fatalf("create over an existing dataset: %v", err)
	}
}
