package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bounds of the agent's code: a function a reader takes in at once, and an
// Agent whose state stays a few values passed forward (the parts, the
// served version) rather than a struct every stage reads and resets.
const (
	maxFuncLines   = 60
	maxAgentFields = 12
)

// boundedDirs are the packages whose functions TestBounds measures: the
// agent's, the room a version goes through (agent/ingest) and the client
// of the control plane that brings the versions (agent/discovery).
var boundedDirs = []string{".", "ingest", "discovery"}

// TestBounds fails when a function of the non-test files of boundedDirs
// runs over maxFuncLines lines (from func to its closing brace) or Agent
// has more than maxAgentFields fields.
func TestBounds(t *testing.T) {
	fset := token.NewFileSet()
	var files []string
	for _, dir := range boundedDirs {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	agentFields := -1
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxFuncLines {
					t.Errorf("%s: %s is %d lines, more than %d", fset.Position(n.Pos()), n.Name.Name, lines, maxFuncLines)
				}
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok && n.Name.Name == "Agent" {
					agentFields = fieldCount(st)
				}
			}
			return true
		})
	}
	switch {
	case agentFields < 0:
		t.Error("no Agent struct found")
	case agentFields > maxAgentFields:
		t.Errorf("Agent has %d fields, more than %d", agentFields, maxAgentFields)
	}
}

// fieldCount counts the fields of st, each name of a list (a, b T) and
// each embedded type one.
func fieldCount(st *ast.StructType) int {
	n := 0
	for _, f := range st.Fields.List {
		n += max(len(f.Names), 1)
	}
	return n
}
