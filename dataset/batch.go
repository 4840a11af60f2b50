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
	reads   []rangeRead
	bytes   int64 // sample bytes read
}

// colBufs are one column's buffers: offsets and values for variable-length
// columns, values only for fixed-width and fixed-size ones. A list type's
// values are its child array's (elemType, elems long).
type colBufs struct {
	typ        arrow.DataType
	offsets    int // arena offsets, -1 when none
	offsetsLen int
	values     int
	valuesLen  int
	elemType   arrow.DataType
	elems      int
}

// batchSize is the arena space a batch of these samples takes (an upper
// bound, counting alignment).
func (d *Dataset) batchSize(samples []int64, cols []int, indexCol bool) int {
	n := len(samples)
	total := 0
	for _, c := range cols {
		if lay := d.ix.lay[c]; lay.inline > 0 {
			total += n*lay.inline + align
		} else {
			total += (n+1)*lay.offsets + 2*align
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
	var reads []rangeRead
	for _, c := range cols {
		col, lay := d.m.Columns[c], d.ix.lay[c]
		cb := colBufs{typ: lay.arrow, offsets: -1, values: -1, elemType: lay.elemType}
		if w := lay.inline; w > 0 {
			off, err := a.alloc(ctx, n*w)
			if err != nil {
				return fail(err)
			}
			cb.values, cb.valuesLen = off, n*w
			j.cols = append(j.cols, cb)
			dst, src := a.b[off:off+n*w], d.ix.values[c]
			for i, s := range samples {
				copy(dst[i*w:(i+1)*w], src[s*int64(w):(s+1)*int64(w)])
			}
			continue
		}
		// One pass over the index: where each value is and where it goes
		// in the batch's values buffer (filled in once that is reserved).
		// Offsets count elements: bytes for binary, string and
		// fixed_size_binary, the element type's for lists.
		v := slices.Index(d.ix.vars, c)
		first := len(reads)
		pos := make([]int64, n+1)
		var total int64
		for i, s := range samples {
			so, l := d.ix.varRange(s, v)
			pos[i] = total / int64(lay.elem)
			if l > 0 {
				reads = append(reads, rangeRead{d.ix.shardOf(s), int64(so), int(l), int(total)})
			}
			total += int64(l)
		}
		pos[n] = total / int64(lay.elem)
		if lay.offsets == 4 && pos[n] > math.MaxInt32 {
			return fail(fmt.Errorf("column %s (%s): a batch of %d elements exceeds Arrow's 32-bit offsets; use smaller batches", col.Name, col.Type, pos[n]))
		}
		cb.elems = int(pos[n])
		j.cols = append(j.cols, cb) // registered now so discard frees it
		if lay.offsets > 0 {
			off, err := a.alloc(ctx, (n+1)*lay.offsets)
			if err != nil {
				return fail(err)
			}
			cb.offsets, cb.offsetsLen = off, (n+1)*lay.offsets
			j.cols[len(j.cols)-1] = cb
			offs := a.b[off : off+(n+1)*lay.offsets]
			for i, p := range pos {
				if lay.offsets == 8 {
					binary.LittleEndian.PutUint64(offs[i*8:], uint64(p))
				} else {
					binary.LittleEndian.PutUint32(offs[i*4:], uint32(p))
				}
			}
		}
		vals, err := a.alloc(ctx, int(total))
		if err != nil {
			return fail(err)
		}
		cb.values, cb.valuesLen = vals, int(total)
		j.cols[len(j.cols)-1] = cb
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
			binary.LittleEndian.PutUint64(a.b[off+i*8:], uint64(s))
		}
	}
	// Sort by shard and offset, then merge ranges that are adjacent both in
	// the shard and in the batch buffer into one read.
	slices.SortFunc(reads, func(x, y rangeRead) int {
		if x.shard != y.shard {
			return x.shard - y.shard
		}
		return int(x.off - y.off)
	})
	for _, r := range reads {
		if k := len(j.reads) - 1; k >= 0 {
			last := &j.reads[k]
			if last.shard == r.shard && last.off+int64(last.n) == r.off && last.dst+last.n == r.dst {
				last.n += r.n
				continue
			}
		}
		j.reads = append(j.reads, r)
	}
	return j, nil
}

// read fills the batch from storage.
func (j *job) read(ctx context.Context) error {
	if len(j.reads) == 0 {
		return nil
	}
	if err := j.a.mem.read(ctx, j.d, j.reads); err != nil {
		return fmt.Errorf("dataset %s: %w", j.d.m.Name, err)
	}
	return nil
}

// record hands the buffers to an Arrow record batch; the job is spent.
func (j *job) record() arrow.RecordBatch {
	n := len(j.samples)
	arrs := make([]arrow.Array, len(j.cols))
	for i, cb := range j.cols {
		values := j.a.buffer(cb.values, cb.valuesLen)
		var data arrow.ArrayData
		switch {
		case cb.elemType != nil: // a list type: the values are its child's
			child := array.NewData(cb.elemType, cb.elems, []*memory.Buffer{nil, values}, nil, 0, 0)
			bufs := []*memory.Buffer{nil}
			if cb.offsets >= 0 {
				bufs = append(bufs, j.a.buffer(cb.offsets, cb.offsetsLen))
			}
			data = array.NewData(cb.typ, n, bufs, []arrow.ArrayData{child}, 0, 0)
			child.Release()
			for _, b := range bufs[1:] {
				b.Release()
			}
		case cb.offsets >= 0:
			offsets := j.a.buffer(cb.offsets, cb.offsetsLen)
			data = array.NewData(cb.typ, n, []*memory.Buffer{nil, offsets, values}, nil, 0, 0)
			offsets.Release()
		default:
			data = array.NewData(cb.typ, n, []*memory.Buffer{nil, values}, nil, 0, 0)
		}
		values.Release()
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
