package sdk

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sluicefs/sluice/fsmeta"
)

// checkPath is the one place the SDK checks a path before it goes to the
// cluster. The rule:
//
//   - With at == 0 (the path calls: Mkdir, Create, Open, Stat, ...) the path
//     must be absolute: it starts with "/".
//   - With at set (the *At calls) it is relative to that directory inode
//     and must not start with "/"; "" names the inode itself.
//   - Every name between slashes must be one a directory can hold
//     (fsmeta.CheckName): not empty (so no "//"), not "." or "..", no NUL. A
//     single trailing "/" is allowed ("/a/" is "/a").
//
// So "." and ".." are refused, never resolved: the SDK does no lexical
// cleaning, and no path can climb above "/" (or above at). Anything refused
// wraps fs.ErrInvalid and ErrInvalid, and names the path; a name longer
// than a directory holds is ErrNameTooLong, as the cluster says it.
func checkPath(op string, at uint64, p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s %q: %s: %w (%w)", op, where(at, p), why, fs.ErrInvalid, ErrInvalid)
	}
	rest := p
	if at == 0 {
		var ok bool
		if rest, ok = strings.CutPrefix(p, "/"); !ok {
			return bad("not an absolute path")
		}
	} else if strings.HasPrefix(p, "/") {
		return bad("an absolute path where one relative to a directory inode was expected")
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		if p != "" && p != "/" { // "//" and the like: an empty name
			return bad("empty name")
		}
		return nil
	}
	for name := range strings.SplitSeq(rest, "/") {
		err := fsmeta.CheckName(name)
		switch {
		case err == nil:
		case errors.Is(err, ErrNameTooLong):
			return fmt.Errorf("%s %q: %w", op, where(at, p), err)
		case name == "":
			return bad("empty name (two slashes in a row)")
		case name == "." || name == "..":
			return bad(fmt.Sprintf("%q names are refused, not resolved", name))
		default:
			return bad(fmt.Sprintf("name %q", name))
		}
	}
	return nil
}
