// Package kustomizetest renders the kustomizations of examples/ as
// `kubectl apply -k` does, with kustomize's Go library, for tests that
// check or install what users apply.
package kustomizetest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization in dir (relative to examples, the
// repository's examples/ folder) and returns its objects in kustomize's
// order. Every YAML file under examples is copied into an in-memory file
// system first, through edit when it is not nil (path relative to
// examples, e.g. "kubernetes/kustomization.yaml"), so a test can change a
// line as a user would without touching the tree.
func Render(t testing.TB, examples, dir string, edit func(path string, data []byte) []byte) []*unstructured.Unstructured {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(examples, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, err := filepath.Rel(examples, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if edit != nil {
			data = edit(filepath.ToSlash(rel), data)
		}
		return mem.WriteFile(filepath.Join("/examples", rel), data)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", examples, err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, filepath.Join("/examples", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return Decode(t, out)
}

// Decode splits a multi-document YAML (or JSON) stream into objects,
// leaving out empty documents.
func Decode(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

// Find returns the object of kind and name in objs, failing the test when
// there is none.
func Find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in the rendered objects", kind, name)
	return nil
}
