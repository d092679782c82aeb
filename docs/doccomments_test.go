package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// wellKnownMethods implement interfaces whose meaning the interface
// states (fmt.Stringer, error, errors' Unwrap, Is and As, encoding's
// marshalers), so they need no comment of their own.
var wellKnownMethods = map[string]bool{
	"Error": true, "String": true, "Unwrap": true, "Is": true, "As": true, "Format": true, "GoString": true,
	"MarshalJSON": true, "UnmarshalJSON": true, "MarshalText": true, "UnmarshalText": true,
}

// TestExportedIdentifiersDocumented checks that every exported identifier
// of the public packages (all but internal/, cmd/, integration/ and tests)
// has a doc comment: types, functions, methods of exported types but those
// of wellKnownMethods, constants and variables (a group's comment covers
// its members). Struct fields are the type's to explain, and are left to
// its comment where their names say what they hold (Key, Partition).
func TestExportedIdentifiersDocumented(t *testing.T) {
	var missing []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "internal", "cmd", "integration", "docs", "testdata":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && path != ".." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		miss := func(pos token.Pos, what string) {
			missing = append(missing, fset.Position(pos).String()+": "+what)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv != nil {
					if !receiverExported(d.Recv.List[0].Type) || wellKnownMethods[d.Name.Name] {
						continue
					}
				}
				miss(d.Pos(), d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if d.Doc == nil && s.Doc == nil {
							miss(s.Pos(), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
								miss(n.Pos(), n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("%d exported identifiers without a doc comment:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}

// receiverExported reports whether a method's receiver type is exported.
func receiverExported(x ast.Expr) bool {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return true
		}
	}
}
