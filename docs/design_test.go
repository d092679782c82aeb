package docs

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/eddystreams/eddy/"

// packageRows reads DESIGN.md's package table: the package paths of its
// rows, top to bottom.
func packageRows(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Packages\n")
	if !ok {
		t.Fatal("DESIGN.md has no Packages section")
	}
	row := regexp.MustCompile("^\\| `([a-z/]+?)/?` \\|")
	var rows []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		if m := row.FindStringSubmatch(line); m != nil {
			rows = append(rows, m[1])
		}
	}
	return rows
}

// TestPackageTableOrder holds DESIGN.md's rule for its package table: every
// package of the module has a row (a package under a row's folder belongs
// to that row), and a package imports only packages of its own row or of
// rows above it.
func TestPackageTableOrder(t *testing.T) {
	rows := packageRows(t)
	if len(rows) < 10 {
		t.Fatalf("read %d rows from DESIGN.md's package table: %v", len(rows), rows)
	}
	rowOf := func(pkg string) int {
		best, bestLen := -1, -1
		for i, r := range rows {
			if (pkg == r || strings.HasPrefix(pkg, r+"/")) && len(r) > bestLen {
				best, bestLen = i, len(r)
			}
		}
		return best
	}
	imports := make(map[string]map[string]bool)
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))
		if imports[pkg] == nil {
			imports[pkg] = make(map[string]bool)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if dep, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][dep] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, deps := range imports {
		r := rowOf(pkg)
		if r < 0 {
			t.Errorf("package %s has no row in DESIGN.md's package table", pkg)
			continue
		}
		for dep := range deps {
			if d := rowOf(dep); d > r {
				t.Errorf("%s (row %q) imports %s (row %q, below it)", pkg, rows[r], dep, rows[d])
			}
		}
	}
}

// TestInvariantTestsExist checks that every test DESIGN.md's invariants
// table names (`pkg.TestName`) exists, so the table cannot point at a test
// that was renamed or removed.
func TestInvariantTestsExist(t *testing.T) {
	b, err := os.ReadFile("../DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "| invariant | held by |")
	if !ok {
		t.Fatal("DESIGN.md has no invariants table")
	}
	table, _, _ := strings.Cut(rest, "\n\n")
	named := regexp.MustCompile("`([a-z]+)\\.(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(table, -1)
	if len(named) < 5 {
		t.Fatalf("found %d tests in the invariants table", len(named))
	}
	defined := make(map[string]bool) // "pkg.TestName", pkg the folder's last element
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := filepath.Base(filepath.Dir(path))
		for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllStringSubmatch(string(src), -1) {
			defined[pkg+"."+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range named {
		if !defined[m[1]+"."+m[2]] {
			t.Errorf("DESIGN.md names %s.%s, which no test file defines", m[1], m[2])
		}
	}
}
