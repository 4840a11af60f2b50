package dataset

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

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
