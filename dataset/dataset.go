package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sluicefs/sluice/internal/crc32c"
	"github.com/sluicefs/sluice/sdk"
)

// Dataset is an open dataset: its manifest and index in memory and its
// shard files open.
type Dataset struct {
	c      *sdk.Client
	m      *Manifest
	ix     *index
	shards []*sdk.File

	mu      sync.Mutex
	loaders int // open loaders, which read the shards
	closed  bool
}

// ReadManifest reads dataset name's manifest alone: what it is, without
// the index and shards Open reads and opens.
func ReadManifest(ctx context.Context, c *sdk.Client, name string) (*Manifest, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	mb, err := readAll(ctx, c, path.Join(Dir(name), "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("open dataset %s: %w", name, err)
	}
	return decodeManifest(name, mb)
}

// Open opens dataset name.
func Open(ctx context.Context, c *sdk.Client, name string) (*Dataset, error) {
	m, err := ReadManifest(ctx, c, name)
	if err != nil {
		return nil, err
	}
	ib, err := readAll(ctx, c, path.Join(Dir(name), "index.bin"))
	if err != nil {
		return nil, fmt.Errorf("open dataset %s: %w", name, err)
	}
	ix, err := decodeIndex(m, ib)
	if err != nil {
		return nil, err
	}
	d := &Dataset{c: c, m: m, ix: ix}
	for _, s := range m.Shards {
		f, err := c.Open(ctx, path.Join(Dir(name), s.File))
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("open dataset %s: %w", name, err)
		}
		if f.Size() != s.Bytes {
			d.Close()
			return nil, fmt.Errorf("open dataset %s: shard %s has %d bytes, the manifest says %d", name, s.File, f.Size(), s.Bytes)
		}
		d.shards = append(d.shards, f)
	}
	return d, nil
}

func readAll(ctx context.Context, c *sdk.Client, p string) ([]byte, error) {
	f, err := c.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// Close closes the shard files. Batches already made stay valid; loaders
// must be closed first.
func (d *Dataset) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.loaders > 0 {
		return fmt.Errorf("close dataset %s: %d loaders still open; close them first", d.m.Name, d.loaders)
	}
	d.closed = true
	for _, f := range d.shards {
		f.Close()
	}
	return nil
}

func (d *Dataset) loaderOpened() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("dataset %s is closed", d.m.Name)
	}
	d.loaders++
	return nil
}

func (d *Dataset) loaderClosed() {
	d.mu.Lock()
	d.loaders--
	d.mu.Unlock()
}

// Manifest describes the dataset.
func (d *Dataset) Manifest() *Manifest { return d.m }

// Len is the number of samples.
func (d *Dataset) Len() int64 { return d.m.Samples }

// Schema is the Arrow schema of all columns.
func (d *Dataset) Schema() *arrow.Schema {
	s, _ := d.m.Schema()
	return s
}

// SampleBytes is the stored size of sample i (every column).
func (d *Dataset) SampleBytes(i int64) int64 {
	n := d.ix.sampleBytes(i)
	for _, f := range d.ix.fixed {
		n += int64(d.m.Columns[f].Type.Width())
	}
	return n
}

// Take reads the samples at indices (any order, repeats allowed) into one
// record batch of the named columns (all when none). Release the batch
// when done; its memory is registered for it alone.
func (d *Dataset) Take(ctx context.Context, indices []int64, columns ...string) (arrow.RecordBatch, error) {
	cols, err := d.m.project(columns)
	if err != nil {
		return nil, err
	}
	if err := d.loaderOpened(); err != nil { // Take reads the shards too
		return nil, err
	}
	defer d.loaderClosed()
	for _, i := range indices {
		if i < 0 || i >= d.m.Samples {
			return nil, fmt.Errorf("dataset %s: sample %d out of range [0, %d)", d.m.Name, i, d.m.Samples)
		}
	}
	schema, err := d.m.Schema(columns...)
	if err != nil {
		return nil, err
	}
	a, err := newClientArena(d.c, d.batchSize(indices, cols, false), false)
	if err != nil {
		return nil, err
	}
	defer a.close() // unmapped when the batch is released
	j, err := d.prepare(ctx, a, schema, indices, cols, false)
	if err != nil {
		return nil, err
	}
	if err := j.read(ctx); err != nil {
		j.quarantine() // the arena's close revokes any late push
		return nil, err
	}
	return j.record(), nil
}

// Verify reads every sample and checks its CRC32C against the index,
// reporting progress in samples. It returns the first mismatch.
func (d *Dataset) Verify(ctx context.Context, progress func(samples int64)) error {
	const step = 1024
	for lo := int64(0); lo < d.m.Samples; lo += step {
		idx := make([]int64, 0, step)
		for i := lo; i < min(lo+step, d.m.Samples); i++ {
			idx = append(idx, i)
		}
		rec, err := d.Take(ctx, idx)
		if err != nil {
			return fmt.Errorf("verify %s: %w", d.m.Name, err)
		}
		for r, i := range idx {
			var crc uint32
			for c := range d.m.Columns {
				crc = crc32c.Update(crc, valueBytes(rec.Column(c), r))
			}
			if crc != d.ix.crc[i] {
				rec.Release()
				return fmt.Errorf("verify %s: sample %d: checksum %08x, the index says %08x", d.m.Name, i, crc, d.ix.crc[i])
			}
		}
		rec.Release()
		if progress != nil {
			progress(idx[len(idx)-1] + 1)
		}
	}
	return nil
}

// valueBytes is row r of a column as stored: the bytes of a variable-length
// value, the little-endian bytes of a fixed-width one, a list's elements'.
func valueBytes(col arrow.Array, r int) []byte {
	switch a := col.(type) {
	case *array.Binary:
		return a.Value(r)
	case *array.String:
		return []byte(a.Value(r))
	case *array.FixedSizeBinary:
		return a.Value(r)
	case array.ListLike:
		start, end := a.ValueOffsets(r)
		return elementRange(a.ListValues(), start, end)
	}
	w := col.DataType().(arrow.FixedWidthDataType).Bytes()
	off := (col.Data().Offset() + r) * w
	return col.Data().Buffers()[1].Bytes()[off : off+w]
}

// elementRange is elements [start, end) of a fixed-width array, as bytes.
func elementRange(values arrow.Array, start, end int64) []byte {
	w := int64(values.DataType().(arrow.FixedWidthDataType).Bytes())
	off := int64(values.Data().Offset())
	buf := values.Data().Buffers()[1]
	if buf == nil {
		return nil
	}
	return buf.Bytes()[(off+start)*w : (off+end)*w]
}
