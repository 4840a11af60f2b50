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
