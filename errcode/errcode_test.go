package errcode_test

import (
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// TestCodesUnique: no two codes in the table are equal, and none equals
// the test transport's code (errors.Is would take one for the other).
func TestCodesUnique(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errcode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: importer.ForCompiler(fset, "source", nil)}).Check("errcode", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{int64(fabrictest.ErrApp.Code): "fabrictest.ErrApp"}
	n := 0
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || c.Type().String() != "github.com/sluicefs/sluice/fabric.Code" {
			continue
		}
		v, _ := constant.Int64Val(c.Val())
		if v < int64(fabric.FirstAppCode) {
			t.Errorf("%s = %d is below the application codes", name, v)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("%s and %s share code %d", name, other, v)
		}
		seen[v] = name
		n++
	}
	if n < 20 {
		t.Fatalf("found %d codes in the table; the test reads it wrong", n)
	}
}
