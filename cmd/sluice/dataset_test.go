package main

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestCellPreviewsTensors(t *testing.T) {
	mem := memory.DefaultAllocator
	lb := array.NewFixedSizeListBuilder(mem, 10, arrow.PrimitiveTypes.Float32)
	defer lb.Release()
	lb.Append(true)
	for k := 0; k < 10; k++ {
		lb.ValueBuilder().(*array.Float32Builder).Append(float32(k) / 2)
	}
	l := lb.NewArray()
	defer l.Release()
	if got := cell(l, 0); got != "10 elements [0 0.5 1 1.5 2 2.5 3 3.5 …]" {
		t.Fatalf("fixed_size_list cell %q", got)
	}
	bb := array.NewFixedSizeBinaryBuilder(mem, &arrow.FixedSizeBinaryType{ByteWidth: 3})
	defer bb.Release()
	bb.Append([]byte{0xff, 1, 2})
	b := bb.NewArray()
	defer b.Release()
	if got := cell(b, 0); got != "3 bytes ff0102" {
		t.Fatalf("fixed_size_binary cell %q", got)
	}
}

func TestBinarySumCountsOnlyTheBatchRows(t *testing.T) {
	mem := memory.DefaultAllocator
	bb := array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)
	defer bb.Release()
	for _, v := range []string{"\x01\x01", "\x02", "\x03\x03\x03", "\x04"} {
		bb.Append([]byte(v))
	}
	bin := bb.NewArray()
	defer bin.Release()
	fb := array.NewFixedSizeBinaryBuilder(mem, &arrow.FixedSizeBinaryType{ByteWidth: 2})
	defer fb.Release()
	for _, v := range []string{"\x10\x10", "\x20\x20", "\x30\x30", "\x40\x40"} {
		fb.Append([]byte(v))
	}
	fixed := fb.NewArray()
	defer fixed.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "b", Type: bin.DataType()}, {Name: "f", Type: fixed.DataType()}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{bin, fixed}, 4)
	defer rec.Release()
	if got := binarySum(rec); got != 2+2+9+4+2*(0x10+0x20+0x30+0x40) {
		t.Fatalf("sum %d over the whole batch", got)
	}
	part := rec.NewSlice(1, 3) // rows 1 and 2
	defer part.Release()
	if got := binarySum(part); got != 2+9+2*(0x20+0x30) {
		t.Fatalf("sum %d over rows 1-2", got)
	}
}

func TestByteSumMatchesTheSimpleSum(t *testing.T) {
	b := make([]byte, 5000)
	for i := range b {
		b[i] = byte(255 - i%7) // near the top, so lanes would overflow if folded late
	}
	for _, n := range []int{0, 1, 7, 8, 9, 1023, 1024, 1025, 2047, 5000} {
		var want uint64
		for _, v := range b[:n] {
			want += uint64(v)
		}
		if got := byteSum(b[:n]); got != want {
			t.Fatalf("byteSum of %d bytes = %d, want %d", n, got, want)
		}
	}
}
