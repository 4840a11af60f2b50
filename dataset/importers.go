package dataset

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
//	parquet     Parquet files; binary, string, integer and float columns,
//	            fixed_size_binary, and fixed_size_list, list and large_list
//	            of integers or floats (see Type); pages of any size
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
	return im.finish(src, format, err)
}

// finish ends an import that read its input with err: it abandons the
// writer on an error, else closes it, publishing the dataset.
func (im *importer) finish(src, format string, err error) (*Manifest, error) {
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
	if im.opts.Progress != nil {
		im.opts.Progress(im.total, im.total)
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
