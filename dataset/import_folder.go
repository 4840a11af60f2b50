package dataset

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

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
