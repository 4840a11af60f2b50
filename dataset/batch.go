package dataset

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluicefs/sluice/sdk"
)

// job is one batch on its way: its Arrow buffers reserved in the arena, the
// gathered parts (offsets, fixed-width values, indices) filled, and the
// reads that fill the rest planned, sorted and merged.
type job struct {
	d       *Dataset
	a       *arena
	schema  *arrow.Schema
	samples []int64
	cols    []colBufs
	ops     []sdk.ReadOp
	bytes   int64 // sample bytes read
}

// colBufs are one column's buffers: offsets and values for variable-length
// columns, values only for fixed-width ones.
type colBufs struct {
	typ        arrow.DataType
	offsets    int // arena offsets, -1 when none
	offsetsLen int
	values     int
	valuesLen  int
}

// batchSize is the arena space a batch of these samples takes (an upper
// bound, counting alignment).
func (d *Dataset) batchSize(samples []int64, cols []int, indexCol bool) int {
	n := len(samples)
	total := 0
	for _, c := range cols {
		if w := d.m.Columns[c].Type.Width(); w > 0 {
			total += n*w + align
		} else {
			total += (n+1)*4 + 2*align
		}
	}
	for _, s := range samples {
		total += int(d.varBytes(s, cols))
	}
	if indexCol {
		total += n*8 + align
	}
	return total
}

// varBytes is the size of sample s's values in the variable-length
// columns among cols.
func (d *Dataset) varBytes(s int64, cols []int) int64 {
	var n int64
	for v, c := range d.ix.vars {
		if slices.Contains(cols, c) {
			_, l := d.ix.varRange(s, v)
			n += int64(l)
		}
	}
	return n
}

// prepare reserves a batch's buffers (waiting for budget), gathers what
// lives in the index and plans the reads.
func (d *Dataset) prepare(ctx context.Context, a *arena, schema *arrow.Schema, samples []int64, cols []int, indexCol bool) (*job, error) {
	j := &job{d: d, a: a, schema: schema, samples: samples}
	fail := func(err error) (*job, error) {
		j.discard()
		return nil, err
	}
	n := len(samples)
	type ref struct {
		shard int
		off   int64
		n     int
		dst   int
	}
	var reads []ref
	for _, c := range cols {
		col := d.m.Columns[c]
		cb := colBufs{typ: arrowTypes[col.Type], offsets: -1, values: -1}
		if w := col.Type.Width(); w > 0 {
			off, err := a.alloc(ctx, n*w)
			if err != nil {
				return fail(err)
			}
			cb.values, cb.valuesLen = off, n*w
			j.cols = append(j.cols, cb)
			dst, src := a.buf.B[off:off+n*w], d.ix.values[c]
			for i, s := range samples {
				copy(dst[i*w:(i+1)*w], src[s*int64(w):(s+1)*int64(w)])
			}
			continue
		}
		// One pass over the index: where each value is and where it goes
		// in the batch's values buffer (filled in once that is reserved).
		v := slices.Index(d.ix.vars, c)
		first := len(reads)
		pos := make([]uint32, n+1)
		var total int64
		for i, s := range samples {
			so, l := d.ix.varRange(s, v)
			pos[i] = uint32(total) // checked against 2 GiB below
			if l > 0 {
				reads = append(reads, ref{d.ix.shardOf(s), int64(so), int(l), int(total)})
			}
			total += int64(l)
		}
		if total > math.MaxInt32 {
			return fail(fmt.Errorf("column %s: a batch of %d bytes exceeds Arrow's 2 GiB binary limit; use smaller batches", col.Name, total))
		}
		pos[n] = uint32(total)
		off, err := a.alloc(ctx, (n+1)*4)
		if err != nil {
			return fail(err)
		}
		cb.offsets, cb.offsetsLen = off, (n+1)*4
		j.cols = append(j.cols, cb) // registered now so discard frees it
		vals, err := a.alloc(ctx, int(total))
		if err != nil {
			return fail(err)
		}
		cb.values, cb.valuesLen = vals, int(total)
		j.cols[len(j.cols)-1] = cb
		offs := a.buf.B[off : off+(n+1)*4]
		for i, p := range pos {
			binary.LittleEndian.PutUint32(offs[i*4:], p)
		}
		for k := first; k < len(reads); k++ {
			reads[k].dst += vals
		}
		j.bytes += total
	}
	if indexCol {
		off, err := a.alloc(ctx, n*8)
		if err != nil {
			return fail(err)
		}
		j.cols = append(j.cols, colBufs{typ: arrow.PrimitiveTypes.Int64, offsets: -1, values: off, valuesLen: n * 8})
		for i, s := range samples {
			binary.LittleEndian.PutUint64(a.buf.B[off+i*8:], uint64(s))
		}
	}
	// Sort by shard and offset, then merge ranges that are adjacent both in
	// the shard and in the batch buffer into one read.
	slices.SortFunc(reads, func(x, y ref) int {
		if x.shard != y.shard {
			return x.shard - y.shard
		}
		return int(x.off - y.off)
	})
	for _, r := range reads {
		if k := len(j.ops) - 1; k >= 0 {
			last := &j.ops[k]
			if last.File == d.shards[r.shard] && last.Off+int64(last.N) == r.off && last.BufOff+last.N == r.dst {
				last.N += r.n
				continue
			}
		}
		j.ops = append(j.ops, sdk.ReadOp{File: d.shards[r.shard], Off: r.off, N: r.n, Buf: a.buf, BufOff: r.dst})
	}
	return j, nil
}

// read fills the batch from storage.
func (j *job) read(ctx context.Context) error {
	if len(j.ops) == 0 {
		return nil
	}
	if err := j.d.c.ReadBatch(ctx, j.ops); err != nil {
		return fmt.Errorf("dataset %s: %w", j.d.m.Name, err)
	}
	return nil
}

// record hands the buffers to an Arrow record batch; the job is spent.
func (j *job) record() arrow.RecordBatch {
	n := len(j.samples)
	arrs := make([]arrow.Array, len(j.cols))
	for i, cb := range j.cols {
		bufs := []*memory.Buffer{nil, j.a.buffer(cb.values, cb.valuesLen)}
		if cb.offsets >= 0 {
			bufs = []*memory.Buffer{nil, j.a.buffer(cb.offsets, cb.offsetsLen), bufs[1]}
		}
		data := array.NewData(cb.typ, n, bufs, nil, 0, 0)
		for _, b := range bufs[1:] {
			b.Release()
		}
		arrs[i] = array.MakeFromData(data)
		data.Release()
	}
	rec := array.NewRecordBatch(j.schema, arrs, int64(n))
	for _, a := range arrs {
		a.Release()
	}
	j.cols = nil
	return rec
}

// discard gives back a job's buffers without making a batch. Only for a
// job whose reads were never sent or all came back; after a failed read use
// quarantine.
func (j *job) discard() { j.each(j.a.release) }

// quarantine drops a job whose read failed: a storage node may still be
// pushing into its buffers, so they stay out of use until the arena closes.
func (j *job) quarantine() { j.each(j.a.quarantine) }

func (j *job) each(fn func(off int)) {
	for _, cb := range j.cols {
		if cb.offsets >= 0 {
			fn(cb.offsets)
		}
		if cb.values >= 0 {
			fn(cb.values)
		}
	}
	j.cols = nil
}
