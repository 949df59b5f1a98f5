package ssp2

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// declaredCodes parses the package's source and returns every constant of
// type Code, by name, with its value.
func declaredCodes(t *testing.T) map[string]Code {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]Code{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: code %s is not a string literal", fset.Position(n.Pos()), n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[n.Name] = Code(v)
				}
			}
		}
	}
	return out
}

// TestCodeCatalogComplete checks the catalog against the declared codes:
// each code value is declared once, each declared code has its catalog
// entry, and each entry has a category and an action from SPEC.md §10.2.
// The HTTP status of each code is checked by httpapi's own test.
func TestCodeCatalogComplete(t *testing.T) {
	declared := declaredCodes(t)
	if len(declared) == 0 {
		t.Fatal("no Code constants found")
	}
	byValue := map[Code]string{}
	for name, c := range declared {
		if other, dup := byValue[c]; dup {
			t.Errorf("%s and %s both declare %q", other, name, c)
		}
		byValue[c] = name
	}
	categories := map[string]bool{
		CategoryAuthRequired: true, CategoryForbidden: true, CategoryInvalidRequest: true,
		CategorySchemaMismatch: true, CategoryNotFound: true, CategoryConflict: true,
		CategoryInternal: true, CategoryResetRequired: true, CategoryScopeRevoked: true,
		CategoryRateLimited: true,
	}
	actions := map[string]bool{
		"refreshAuth": true, "checkPermissions": true, "fixRequest": true, "resetClientId": true,
		"regenerateClient": true, "forceResync": true, "resolveConflict": true, "inspectServer": true,
		"retryLater": true, "splitBatch": true, "rebootstrap": true, "upgradeClient": true,
	}
	for c, name := range byValue {
		info, ok := c.Info()
		if !ok {
			t.Errorf("%s (%q) has no catalog entry", name, c)
			continue
		}
		if !categories[info.Category] {
			t.Errorf("%s: category %q is not a SPEC.md §10.2 category", name, info.Category)
		}
		if !actions[info.Action] {
			t.Errorf("%s: recommended action %q is not a SPEC.md §10.2 action", name, info.Action)
		}
		if strings.HasPrefix(string(c), "sync.storage.") && info.Category != CategoryInternal {
			t.Errorf("%s: storage-host codes are internal, not %q", name, info.Category)
		}
	}
	codes := Codes()
	if len(codes) != len(byValue) {
		t.Errorf("catalog has %d codes, the package declares %d", len(codes), len(byValue))
	}
	for _, c := range codes {
		if _, ok := byValue[c]; !ok {
			t.Errorf("catalog entry %q has no Code constant", c)
		}
	}
}
