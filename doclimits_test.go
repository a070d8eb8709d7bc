package redisleader

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The documentation's size limits (STYLE.md): the package doc stays an
// overview, and an exported name's doc says what it does, not how.
const (
	maxDocGoLines     = 150
	maxExportedDocLen = 12
)

// TestDocLimits: doc.go has at most maxDocGoLines lines, and no exported
// name of the package has a doc comment over maxExportedDocLen lines.
func TestDocLimits(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > maxDocGoLines {
		t.Errorf("doc.go has %d lines, over %d: move mechanism to docs/*.md", n, maxDocGoLines)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for what, doc := range exportedDocs(f) {
			if n := docLines(fset, doc); n > maxExportedDocLen {
				t.Errorf("%s: %s's doc comment has %d lines, over %d", fset.Position(doc.Pos()), what, n, maxExportedDocLen)
			}
		}
	}
}

// exportedDocs returns the doc comments of f's exported names (methods of
// exported types included), by name.
func exportedDocs(f *ast.File) map[string]*ast.CommentGroup {
	docs := map[string]*ast.CommentGroup{}
	add := func(name string, doc *ast.CommentGroup) {
		if doc != nil && ast.IsExported(name) {
			docs[name] = doc
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				add(d.Name.Name, d.Doc)
			} else if r := recvName(d.Recv.List[0].Type); ast.IsExported(r) {
				add(r+"."+d.Name.Name, d.Doc)
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				addSpec(add, d, sp)
			}
		}
	}
	return docs
}

// addSpec adds a type, const or var spec's names with its doc, or its
// declaration's when it has none of its own (a lone spec).
func addSpec(add func(string, *ast.CommentGroup), d *ast.GenDecl, sp ast.Spec) {
	switch sp := sp.(type) {
	case *ast.TypeSpec:
		add(sp.Name.Name, docOf(sp.Doc, d.Doc))
	case *ast.ValueSpec:
		for _, n := range sp.Names {
			add(n.Name, docOf(sp.Doc, d.Doc))
		}
	}
}

// docOf returns doc, or else the declaration's.
func docOf(doc, decl *ast.CommentGroup) *ast.CommentGroup {
	if doc != nil {
		return doc
	}
	return decl
}

// recvName is a method receiver's type name.
func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if x, ok := e.(*ast.IndexExpr); ok {
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// docLines is how many lines doc spans.
func docLines(fset *token.FileSet, doc *ast.CommentGroup) int {
	return fset.Position(doc.End()).Line - fset.Position(doc.Pos()).Line + 1
}
