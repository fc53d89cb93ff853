package storage

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// parsePackage parses the package's non-test files.
func parsePackage(t *testing.T) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// isMutex reports whether a field's type is sync.Mutex or sync.RWMutex, or
// a struct embedding one (the `mu struct { sync.Mutex; ... }` grouping).
func isMutex(typ ast.Expr) bool {
	switch typ := typ.(type) {
	case *ast.SelectorExpr:
		pkg, ok := typ.X.(*ast.Ident)
		return ok && pkg.Name == "sync" && (typ.Sel.Name == "Mutex" || typ.Sel.Name == "RWMutex")
	case *ast.StructType:
		for _, f := range typ.Fields.List {
			if len(f.Names) == 0 && isMutex(f.Type) {
				return true
			}
		}
	}
	return false
}

// mutexFields returns every mutex field of the package's types, as
// "Type.field".
func mutexFields(files []*ast.File) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				if !isMutex(field.Type) {
					continue
				}
				for _, name := range field.Names {
					out = append(out, spec.Name.Name+"."+name.Name)
				}
				if len(field.Names) == 0 {
					// An embedded mutex is named after its type.
					out = append(out, spec.Name.Name+"."+field.Type.(*ast.SelectorExpr).Sel.Name)
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return out
}

// documentedLocks returns the locks the tables of doc.go's "Concurrency
// and lock order" section name: the first word of each table row.
func documentedLocks(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "// # Concurrency and lock order\n")
	if !ok {
		t.Fatal("doc.go has no section \"Concurrency and lock order\"")
	}
	row := regexp.MustCompile(`(?m)^//\t([A-Za-z]\w*\.\w+)\s`)
	var out []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// TestLockOrderNamesEveryMutex: the lock tables in the package doc name
// every mutex field of the package's types, once, and nothing else, so
// that a lock added without a place in the order fails here.
func TestLockOrderNamesEveryMutex(t *testing.T) {
	code := mutexFields(parsePackage(t))
	doc := documentedLocks(t)
	if len(code) < 10 {
		t.Fatalf("found only %d mutexes in the code (%v): the parse is broken", len(code), code)
	}
	for _, name := range code {
		if !slices.Contains(doc, name) {
			t.Errorf("%s is a mutex that doc.go's lock order does not name", name)
		}
	}
	for i, name := range doc {
		if !slices.Contains(code, name) {
			t.Errorf("doc.go's lock order names %s, which is no mutex of the package", name)
		}
		if i > 0 && doc[i-1] == name {
			t.Errorf("doc.go's lock order names %s twice", name)
		}
	}
}

// TestLogStaysSmall: Log keeps at most 50 methods and 3 mutexes; a new
// concern gets its own type (see the lock order in doc.go), as the
// snapshots, the transaction index, group commit, the cleaner's state and
// the deletion queue have.
func TestLogStaysSmall(t *testing.T) {
	files := parsePackage(t)
	var methods []string
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok && id.Name == "Log" {
				methods = append(methods, fn.Name.Name)
			}
		}
	}
	var mutexes []string
	for _, name := range mutexFields(files) {
		if strings.HasPrefix(name, "Log.") {
			mutexes = append(mutexes, name)
		}
	}
	if len(methods) < 20 || len(methods) > 50 {
		t.Errorf("Log has %d methods, want at most 50: %v", len(methods), methods)
	}
	if len(mutexes) > 3 {
		t.Errorf("Log has %d mutexes, want at most 3: %v", len(mutexes), mutexes)
	}
}
