package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goFiles calls visit with every Go file of the module under dir (a path
// relative to the module root), parsed with mode.
func goFiles(t *testing.T, dir string, mode parser.Mode, visit func(path string, f *ast.File)) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, mode|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		visit(filepath.ToSlash(strings.TrimPrefix(path, "../")), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoInitFunctions holds the rule that packages are wired to each other
// by what they call, never by an init that sets another package's
// variables: no file of the module, tests aside, declares an init.
func TestNoInitFunctions(t *testing.T) {
	goFiles(t, ".", 0, func(path string, f *ast.File) {
		if strings.HasSuffix(path, "_test.go") {
			return
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
				t.Errorf("%s declares an init function", path)
			}
		}
	})
}

// TestToolsUsePublicPackages holds the commands to the API users have: no
// file under cmd/, tests included, imports a package under internal/.
func TestToolsUsePublicPackages(t *testing.T) {
	goFiles(t, "cmd", parser.ImportsOnly, func(path string, f *ast.File) {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(p, module)
			if !ok || !(strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/")) {
				continue
			}
			t.Errorf("%s imports %s", path, p)
		}
	})
}
