package dataset

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sluicefs/sluice/sdk"
)

// Formats are the importers' names.
var Formats = []string{"folder", "jsonl", "parquet", "arrow", "webdataset"}

// ImportOptions tune an import.
type ImportOptions struct {
	ShardBytes int64
	// Progress, when set, is told the input bytes consumed so far and the
	// total (0 when unknown).
	Progress func(done, total int64)
}

// Import makes dataset name from src (a file, or a directory of such files)
// in the given format:
//
//	folder      a directory with one sub-directory per class (ImageFolder):
//	            columns data (the file's bytes), label (int64, the class's
//	            index in sorted order, names in the manifest), path (string)
//	jsonl       one JSON object per line; strings become string columns,
//	            numbers int64 (all integral) or float64, booleans uint8,
//	            nested values their JSON text
//	parquet     Parquet files; binary, string and fixed-width numeric columns
//	arrow       Arrow IPC files or streams, the same column types
//	webdataset  tar shards; files sharing a key (path up to the first dot of
//	            the name) form a sample, one binary column per extension,
//	            plus __key__
func Import(ctx context.Context, c *sdk.Client, format, src, name string, opts ImportOptions) (*Manifest, error) {
	in, err := inputs(src, format)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", src, err)
	}
	im := &importer{ctx: ctx, c: c, name: name, opts: opts, total: in.bytes}
	switch format {
	case "folder":
		err = im.folder(src)
	case "jsonl":
		err = im.jsonl(in.files)
	case "parquet", "arrow":
		err = im.arrowFiles(format, in.files)
	case "webdataset":
		err = im.webdataset(in.files)
	default:
		return nil, fmt.Errorf("import: unknown format %q (one of %s)", format, strings.Join(Formats, ", "))
	}
	if err != nil {
		if im.w != nil {
			im.w.Abort()
		}
		return nil, fmt.Errorf("import %s as %s: %w", src, format, err)
	}
	if im.w == nil {
		return nil, fmt.Errorf("import %s as %s: no samples found", src, format)
	}
	m, err := im.w.Close()
	if err != nil {
		return nil, err
	}
	if opts.Progress != nil {
		opts.Progress(im.total, im.total)
	}
	return m, nil
}

type inputSet struct {
	files []string
	bytes int64
}

// inputs lists the files to read, sorted: src itself, or the files under it
// (for folder, every file).
func inputs(src, format string) (inputSet, error) {
	var in inputSet
	st, err := os.Stat(src)
	if err != nil {
		return in, err
	}
	if !st.IsDir() {
		if format == "folder" {
			return in, fmt.Errorf("the folder format takes a directory")
		}
		return inputSet{files: []string{src}, bytes: st.Size()}, nil
	}
	ext := map[string]string{"jsonl": ".jsonl", "parquet": ".parquet", "arrow": ".arrow", "webdataset": ".tar"}[format]
	err = filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if ext != "" && !strings.HasSuffix(p, ext) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		in.files = append(in.files, p)
		in.bytes += info.Size()
		return nil
	})
	return in, err
}

type importer struct {
	ctx   context.Context
	c     *sdk.Client
	name  string
	opts  ImportOptions
	w     *Writer
	done  int64
	total int64
}

func (im *importer) create(cols []Column, classes []string, source string) error {
	var err error
	im.w, err = Create(im.ctx, im.c, im.name, cols, WriterOptions{ShardBytes: im.opts.ShardBytes, Classes: classes, Source: source})
	return err
}

func (im *importer) progress(n int64) {
	im.done += n
	if im.opts.Progress != nil {
		im.opts.Progress(im.done, im.total)
	}
}

func (im *importer) folder(src string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var classes []string
	for _, e := range ents {
		if e.IsDir() {
			classes = append(classes, e.Name())
		}
	}
	if len(classes) == 0 {
		return fmt.Errorf("no class directories in %s", src)
	}
	sort.Strings(classes)
	if err := im.create([]Column{{"data", Binary}, {"label", Int64}, {"path", String}}, classes, "folder "+src); err != nil {
		return err
	}
	for label, class := range classes {
		err := filepath.WalkDir(filepath.Join(src, class), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			if err := im.w.Add(b, int64(label), filepath.ToSlash(rel)); err != nil {
				return err
			}
			im.progress(int64(len(b)))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonl reads the files twice: once to settle the schema, once to write.
func (im *importer) jsonl(files []string) error {
	type kind struct {
		str, num, float, boolean, nested bool
	}
	var order []string
	kinds := map[string]*kind{}
	err := eachJSONLine(files, func(where string, obj []field) error {
		for _, f := range obj {
			k := kinds[f.name]
			if k == nil {
				k = &kind{}
				kinds[f.name] = k
				order = append(order, f.name)
			}
			switch v := f.value.(type) {
			case nil:
				return fmt.Errorf("%s: field %q is null (nulls are not supported)", where, f.name)
			case string:
				k.str = true
			case json.Number:
				k.num = true
				if _, err := v.Int64(); err != nil {
					k.float = true
				}
			case bool:
				k.boolean = true
			default:
				k.nested = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var cols []Column
	for _, n := range order {
		k := kinds[n]
		t := String
		switch {
		case k.num && !k.str && !k.boolean && !k.nested && k.float:
			t = Float64
		case k.num && !k.str && !k.boolean && !k.nested:
			t = Int64
		case k.boolean && !k.str && !k.num && !k.nested:
			t = Uint8
		case k.str && !k.num && !k.boolean && !k.nested:
			t = String
		case k.nested && !k.str && !k.num && !k.boolean:
			t = String
		default:
			return fmt.Errorf("field %q mixes types across lines", n)
		}
		cols = append(cols, Column{n, t})
	}
	if len(cols) == 0 {
		return nil
	}
	if err := im.create(cols, nil, "jsonl"); err != nil {
		return err
	}
	vals := make([]any, len(cols))
	return eachJSONLine(files, func(where string, obj []field) error {
		for i := range vals {
			vals[i] = nil
		}
		size := int64(0)
		for _, f := range obj {
			i := slices.IndexFunc(cols, func(c Column) bool { return c.Name == f.name })
			switch cols[i].Type {
			case Float64:
				v, _ := f.value.(json.Number).Float64()
				vals[i] = v
			case Int64:
				v, _ := f.value.(json.Number).Int64()
				vals[i] = v
			case Uint8:
				vals[i] = map[bool]uint8{false: 0, true: 1}[f.value.(bool)]
			default:
				if s, ok := f.value.(string); ok {
					vals[i] = s
				} else {
					vals[i] = string(f.raw)
				}
			}
			size += int64(len(f.raw))
		}
		for i, v := range vals {
			if v == nil {
				return fmt.Errorf("%s: field %q is missing", where, cols[i].Name)
			}
		}
		im.progress(size)
		return im.w.Add(vals...)
	})
}

type field struct {
	name  string
	value any
	raw   json.RawMessage
}

// eachJSONLine calls fn with each line's fields in their order.
func eachJSONLine(files []string, fn func(where string, obj []field) error) error {
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		line := 0
		for sc.Scan() {
			line++
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			where := fmt.Sprintf("%s:%d", p, line)
			obj, err := parseObject(b)
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", where, err)
			}
			if err := fn(where, obj); err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

func parseObject(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{name: t.(string), value: v, raw: raw})
	}
	return out, nil
}

// arrowFiles imports Parquet or Arrow IPC files through Arrow record batches.
func (im *importer) arrowFiles(format string, files []string) error {
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		err = readArrowFile(im.ctx, format, p, func(rec arrow.RecordBatch) error {
			if im.w == nil {
				cols, err := columnsOf(rec.Schema())
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				if err := im.create(cols, nil, format); err != nil {
					return err
				}
			} else if !sameColumns(im.w.m.Columns, rec.Schema()) {
				return fmt.Errorf("%s: schema %v differs from the first file's", p, rec.Schema())
			}
			vals := make([]any, rec.NumCols())
			for r := 0; r < int(rec.NumRows()); r++ {
				for c := range vals {
					v, err := arrowValue(rec.Column(c), r)
					if err != nil {
						return fmt.Errorf("%s: row %d column %s: %w", p, r, rec.ColumnName(c), err)
					}
					vals[c] = v
				}
				if err := im.w.Add(vals...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		im.progress(st.Size())
	}
	return nil
}

func readArrowFile(ctx context.Context, format, p string, fn func(arrow.RecordBatch) error) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var rr array.RecordReader
	switch format {
	case "parquet":
		pf, err := file.NewParquetReader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		defer pf.Close()
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		r, err := fr.GetRecordReader(ctx, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
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

func columnsOf(s *arrow.Schema) ([]Column, error) {
	var cols []Column
	for _, f := range s.Fields() {
		t, ok := fromArrow[f.Type.ID()]
		if !ok {
			return nil, fmt.Errorf("column %s has type %s; supported: binary, string, integers, floats", f.Name, f.Type)
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
	}
	return nil, fmt.Errorf("type %s not supported", col.DataType())
}

// webdataset groups each tar's members by key; a sample's members are
// consecutive, as WebDataset writes them.
func (im *importer) webdataset(files []string) error {
	var cols []Column
	var key string
	var members map[string][]byte
	flush := func() error {
		if members == nil {
			return nil
		}
		if im.w == nil {
			exts := make([]string, 0, len(members))
			for e := range members {
				exts = append(exts, e)
			}
			sort.Strings(exts)
			cols = []Column{{"__key__", String}}
			for _, e := range exts {
				cols = append(cols, Column{e, Binary})
			}
			if err := im.create(cols, nil, "webdataset"); err != nil {
				return err
			}
		}
		vals := []any{key}
		for _, c := range cols[1:] {
			b, ok := members[c.Name]
			if !ok {
				return fmt.Errorf("sample %q has no .%s member", key, c.Name)
			}
			vals = append(vals, b)
		}
		if len(members) != len(cols)-1 {
			return fmt.Errorf("sample %q has members beyond the first sample's %d", key, len(cols)-1)
		}
		members = nil
		return im.w.Add(vals...)
	}
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", p, err)
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			dir, base := filepath.Split(h.Name)
			dot := strings.IndexByte(base, '.')
			if dot <= 0 {
				f.Close()
				return fmt.Errorf("%s: member %q has no extension", p, h.Name)
			}
			k, ext := dir+base[:dot], base[dot+1:]
			if h.Size > math.MaxInt32 {
				f.Close()
				return fmt.Errorf("%s: member %q is too large", p, h.Name)
			}
			b := make([]byte, h.Size)
			if _, err := io.ReadFull(tr, b); err != nil {
				f.Close()
				return fmt.Errorf("%s: %s: %w", p, h.Name, err)
			}
			if k != key || members == nil {
				if err := flush(); err != nil {
					f.Close()
					return err
				}
				key, members = k, map[string][]byte{}
			}
			if _, dup := members[ext]; dup {
				f.Close()
				return fmt.Errorf("%s: sample %q has two .%s members", p, k, ext)
			}
			members[ext] = b
			im.progress(h.Size + 512)
		}
		f.Close()
	}
	return flush()
}
