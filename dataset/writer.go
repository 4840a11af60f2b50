package dataset

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluicefs/sluice/internal/crc32c"
	"github.com/sluicefs/sluice/sdk"
)

// WriterOptions tune how a dataset is written.
type WriterOptions struct {
	ShardBytes int64    // a new shard starts past this size (default 256 MiB)
	Classes    []string // label names, stored in the manifest
	Source     string   // what the dataset was made from, for inspect
}

// Writer writes a new dataset: samples go to shard files as they come, the
// index and manifest at Close. The dataset appears under its name only
// when Close succeeds (it is written in a hidden directory and renamed).
type Writer struct {
	ctx     context.Context
	c       *sdk.Client
	m       Manifest
	opts    WriterOptions
	tmp     string
	ix      index
	shard   *sdk.File
	off     int64  // bytes in the current shard
	pending []byte // bytes not yet written to it
	closed  bool
}

const writeChunk = 4 << 20

// Create starts writing dataset name with the given schema.
func Create(ctx context.Context, c *sdk.Client, name string, cols []Column, opts WriterOptions) (*Writer, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkSchema(cols); err != nil {
		return nil, fmt.Errorf("create dataset %s: %w", name, err)
	}
	if opts.ShardBytes <= 0 {
		opts.ShardBytes = 256 << 20
	}
	if _, err := c.Stat(ctx, Dir(name)); err == nil {
		return nil, fmt.Errorf("create dataset %s: %w", name, sdk.ErrExist)
	}
	if err := c.Mkdir(ctx, "/datasets", 0o755); err != nil && !errors.Is(err, sdk.ErrExist) {
		return nil, fmt.Errorf("create dataset %s: %w", name, err)
	}
	var r [6]byte
	rand.Read(r[:])
	w := &Writer{ctx: ctx, c: c, opts: opts, tmp: path.Join("/datasets", ".new-"+name+"-"+hex.EncodeToString(r[:]))}
	w.m = Manifest{Version: FormatVersion, Name: name, Columns: cols, Classes: opts.Classes, Source: opts.Source}
	w.ix.setColumns(cols)
	w.ix.values = map[int][]byte{}
	if err := c.Mkdir(ctx, w.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("create dataset %s: %w", name, err)
	}
	return w, nil
}

// Add appends one sample: a value per column, in schema order. Binary and
// string columns take []byte or string; integer columns any Go integer
// that fits; float columns float32 or float64; fixed_size_binary []byte of
// its size; list types a slice of their element type ([]float32 for
// list<float32>) or []byte holding the elements little-endian, of the
// list's size when it has one.
func (w *Writer) Add(values ...any) error {
	if w.closed {
		return errors.New("dataset writer: add after close")
	}
	if len(values) != len(w.m.Columns) {
		return fmt.Errorf("dataset %s: sample %d has %d values, the schema %d columns", w.m.Name, w.m.Samples, len(values), len(w.m.Columns))
	}
	if w.shard == nil || w.off+int64(len(w.pending)) >= w.opts.ShardBytes {
		if err := w.nextShard(); err != nil {
			return err
		}
	}
	// Check and encode every value before anything is appended, so a bad
	// sample leaves the writer as it was.
	enc := make([][]byte, len(values))
	crc := uint32(0)
	var fixed [8]byte
	for i, c := range w.m.Columns {
		var b []byte
		var err error
		if lay := w.ix.lay[i]; lay.inline == 0 {
			if b, err = varValue(c, lay, values[i]); err == nil && len(b) > math.MaxUint32 {
				err = fmt.Errorf("column %s value of %d bytes is too large", c.Name, len(b))
			}
		} else {
			b, err = fixedValue(c, values[i], fixed[:0])
			b = append([]byte(nil), b...)
		}
		if err != nil {
			return fmt.Errorf("dataset %s: sample %d: %w", w.m.Name, w.m.Samples, err)
		}
		enc[i] = b
		crc = crc32c.Update(crc, b)
	}
	start := w.off + int64(len(w.pending))
	for i := range w.m.Columns {
		if w.ix.lay[i].inline == 0 {
			w.pending = append(w.pending, enc[i]...)
			w.ix.length = append(w.ix.length, uint32(len(enc[i])))
		} else {
			w.ix.values[i] = append(w.ix.values[i], enc[i]...)
		}
	}
	w.ix.start = append(w.ix.start, uint64(start))
	w.ix.crc = append(w.ix.crc, crc)
	w.m.Samples++
	w.m.Shards[len(w.m.Shards)-1].Samples++
	if len(w.pending) >= writeChunk {
		return w.flush()
	}
	return nil
}

func (w *Writer) nextShard() error {
	if err := w.closeShard(); err != nil {
		return err
	}
	name := fmt.Sprintf("shard-%05d.data", len(w.m.Shards))
	f, err := w.c.Create(w.ctx, path.Join(w.tmp, name))
	if err != nil {
		return fmt.Errorf("dataset %s: %w", w.m.Name, err)
	}
	w.shard, w.off = f, 0
	w.m.Shards = append(w.m.Shards, Shard{File: name})
	return nil
}

func (w *Writer) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	if _, err := w.shard.WriteAt(w.pending, w.off); err != nil {
		return fmt.Errorf("dataset %s: %w", w.m.Name, err)
	}
	w.off += int64(len(w.pending))
	w.pending = w.pending[:0]
	return nil
}

func (w *Writer) closeShard() error {
	if w.shard == nil {
		return nil
	}
	if err := w.flush(); err != nil {
		return err
	}
	w.m.Shards[len(w.m.Shards)-1].Bytes = w.off
	err := w.shard.Close()
	w.shard = nil
	if err != nil {
		return fmt.Errorf("dataset %s: %w", w.m.Name, err)
	}
	return nil
}

// Samples is how many samples were added so far.
func (w *Writer) Samples() int64 { return w.m.Samples }

// Close writes the index and manifest and publishes the dataset.
func (w *Writer) Close() (*Manifest, error) {
	if w.closed {
		return nil, errors.New("dataset writer: already closed")
	}
	w.closed = true
	if err := w.closeShard(); err != nil {
		w.abort()
		return nil, err
	}
	ix := w.ix.encode(w.m.Columns)
	sum := sha256.Sum256(ix)
	w.m.IndexSize, w.m.Hash = int64(len(ix)), hex.EncodeToString(sum[:])
	mb, err := encodeManifest(&w.m)
	if err == nil {
		err = w.put("index.bin", ix)
	}
	if err == nil {
		err = w.put("manifest.json", mb)
	}
	if err == nil {
		err = w.c.Rename(w.ctx, w.tmp, Dir(w.m.Name))
	}
	if err != nil {
		w.abort()
		return nil, fmt.Errorf("dataset %s: %w", w.m.Name, err)
	}
	m := w.m
	return &m, nil
}

// Abort drops a dataset not yet closed.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		if w.shard != nil {
			w.shard.Close()
		}
		w.abort()
	}
}

func (w *Writer) abort() { removeAll(w.ctx, w.c, w.tmp) }

func (w *Writer) put(name string, b []byte) error {
	f, err := w.c.Create(w.ctx, path.Join(w.tmp, name))
	if err != nil {
		return err
	}
	for off := 0; off < len(b); off += writeChunk {
		if _, err := f.WriteAt(b[off:min(len(b), off+writeChunk)], int64(off)); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// Remove deletes dataset name.
func Remove(ctx context.Context, c *sdk.Client, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if _, err := c.Stat(ctx, Dir(name)); err != nil {
		return fmt.Errorf("remove dataset %s: %w", name, err)
	}
	return removeAll(ctx, c, Dir(name))
}

func removeAll(ctx context.Context, c *sdk.Client, dir string) error {
	ents, err := c.ReadDir(ctx, dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := c.Remove(ctx, path.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return c.Remove(ctx, dir)
}

// varValue is v as stored in a shard for column c.
func varValue(c Column, lay layout, v any) ([]byte, error) {
	var b []byte
	switch x := v.(type) {
	case []byte:
		b = x
	case string:
		if lay.elemType != nil {
			return nil, fmt.Errorf("column %s (%s) takes a slice of its elements or []byte, not a string", c.Name, c.Type)
		}
		b = []byte(x)
	default:
		if lay.elemType == nil {
			return nil, fmt.Errorf("column %s (%s) takes []byte or string, not %T", c.Name, c.Type, v)
		}
		var ok bool
		if b, ok = elementBytes(lay.elemType, v); !ok {
			return nil, fmt.Errorf("column %s (%s) takes []%s or []byte, not %T", c.Name, c.Type, lay.elemType, v)
		}
	}
	if c.Type == String && !utf8.Valid(b) {
		return nil, fmt.Errorf("column %s: value is not UTF-8", c.Name)
	}
	if lay.size > 0 && len(b) != lay.size {
		return nil, fmt.Errorf("column %s (%s): value of %d bytes, the type holds %d", c.Name, c.Type, len(b), lay.size)
	}
	if len(b)%lay.elem != 0 {
		return nil, fmt.Errorf("column %s (%s): %d bytes is not a whole number of %d-byte elements", c.Name, c.Type, len(b), lay.elem)
	}
	return b, nil
}

// elementBytes is a slice of elements of type et as little-endian bytes
// (a view on little-endian machines, which are all Sluice runs on).
func elementBytes(et arrow.DataType, v any) ([]byte, bool) {
	view := func(p unsafe.Pointer, n, w int) []byte {
		if n == 0 {
			return []byte{}
		}
		return unsafe.Slice((*byte)(p), n*w)
	}
	switch x := v.(type) {
	case []int8:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 1), et.ID() == arrow.INT8
	case []int16:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 2), et.ID() == arrow.INT16
	case []int32:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 4), et.ID() == arrow.INT32
	case []int64:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 8), et.ID() == arrow.INT64
	case []uint16:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 2), et.ID() == arrow.UINT16
	case []uint32:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 4), et.ID() == arrow.UINT32
	case []uint64:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 8), et.ID() == arrow.UINT64
	case []float32:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 4), et.ID() == arrow.FLOAT32
	case []float64:
		return view(unsafe.Pointer(unsafe.SliceData(x)), len(x), 8), et.ID() == arrow.FLOAT64
	}
	return nil, false
}

// fixedValue appends v as column c's little-endian bytes.
func fixedValue(c Column, v any, out []byte) ([]byte, error) {
	if c.Type == Float32 || c.Type == Float64 {
		var f float64
		switch x := v.(type) {
		case float32:
			f = float64(x)
		case float64:
			f = x
		default:
			return nil, fmt.Errorf("column %s (%s) takes a float, not %T", c.Name, c.Type, v)
		}
		if c.Type == Float32 {
			return binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(out, math.Float64bits(f)), nil
	}
	i, u, signed, ok := integer(v)
	if !ok {
		return nil, fmt.Errorf("column %s (%s) takes an integer, not %T", c.Name, c.Type, v)
	}
	w := c.Type.Width()
	bitsN := uint(8 * w)
	isSigned := c.Type[0] == 'i'
	switch {
	case isSigned && signed && (bitsN == 64 || (i >= -1<<(bitsN-1) && i < 1<<(bitsN-1))):
		u = uint64(i)
	case isSigned && !signed && (u < 1<<(bitsN-1)):
	case !isSigned && signed && i >= 0 && (bitsN == 64 || uint64(i) < 1<<bitsN):
		u = uint64(i)
	case !isSigned && !signed && (bitsN == 64 || u < 1<<bitsN):
	default:
		return nil, fmt.Errorf("column %s (%s): value %v out of range", c.Name, c.Type, v)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], u)
	return append(out, b[:w]...), nil
}

func integer(v any) (i int64, u uint64, signed, ok bool) {
	switch x := v.(type) {
	case int:
		return int64(x), 0, true, true
	case int8:
		return int64(x), 0, true, true
	case int16:
		return int64(x), 0, true, true
	case int32:
		return int64(x), 0, true, true
	case int64:
		return x, 0, true, true
	case uint:
		return 0, uint64(x), false, true
	case uint8:
		return 0, uint64(x), false, true
	case uint16:
		return 0, uint64(x), false, true
	case uint32:
		return 0, uint64(x), false, true
	case uint64:
		return 0, x, false, true
	}
	return 0, 0, false, false
}
