package proxy

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pipelineFiles are the files a query goes through, one stage after the
// other (README.md, The walk of a query).
var pipelineFiles = []string{
	"handler.go", "request.go", "parse.go", "decision.go", "decide.go", "judge.go", "chase.go",
	"answers.go", "policy.go", "state.go", "reply.go", "resolver.go", "explain.go",
}

// TestPipelineOneWay: no two files of the pipeline use each other's
// definitions, so a query's path reads one way (parse, decide, reply,
// observe) instead of returning to handler.go from every stage.
func TestPipelineOneWay(t *testing.T) {
	bp, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range bp.GoFiles {
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, n, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Imports are empty packages: only this package's own definitions
	// matter, and type-checking the dependencies from source is slow.
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			return types.NewPackage(path, filepath.Base(path)), nil
		}),
		Error: func(error) {}, // what the empty imports leave unresolved
	}
	pkg, _ := conf.Check("proxy", fset, files, info)
	uses := map[[2]string]bool{}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg {
			continue
		}
		if _, ok := obj.(*types.PkgName); ok {
			continue
		}
		from, to := filepath.Base(fset.File(id.Pos()).Name()), filepath.Base(fset.File(obj.Pos()).Name())
		if from != to && slices.Contains(pipelineFiles, from) && slices.Contains(pipelineFiles, to) {
			uses[[2]string{from, to}] = true
		}
	}
	for k := range uses {
		if k[0] < k[1] && uses[[2]string{k[1], k[0]}] {
			t.Errorf("%s and %s use each other's definitions", k[0], k[1])
		}
	}
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// TestRequestHoldsTheParse: a request is what the parse stage read, and
// nothing a later stage decides or hands over; those go in a decision.
func TestRequestHoldsTheParse(t *testing.T) {
	var got []string
	for f := range reflect.TypeFor[request]().Fields() {
		got = append(got, f.Name)
	}
	if diff := cmp.Diff([]string{"Query", "proto", "addrs"}, got); diff != "" {
		t.Errorf("request fields (-want +got):\n%s", diff)
	}
}
