package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/filesource"
)

// inputKind is what a validate flag says its files hold. kindAny (-f)
// reads every document for what it is: the rendered chart, the examples,
// a kustomize build.
type inputKind int

const (
	kindAny inputKind = iota
	kindEntries
	kindTemplate
	kindForwarding
)

// The ConfigMap keys the control plane mounts and reads (the chart's and
// examples/kubernetes' controlplane Deployment): template.yaml for
// --inject-template, rules.yaml for --forwarding-rules; an entries
// ConfigMap's every *.yaml key is an entries file.
const (
	templateKey   = "template.yaml"
	forwardingKey = "rules.yaml"
)

// check is one thing validate checked or skipped: a bare file, one key of
// a ConfigMap, one DNSPolicy, one object it does not know.
type check struct {
	File     string   `json:"file"`
	Object   string   `json:"object,omitempty"` // "ConfigMap ns/name key k", "DNSPolicy ns/name"; "" for a bare file
	Kind     string   `json:"kind"`             // entries, inject-template, forwarding-rules, DNSPolicy, or the skipped object's kind
	Status   string   `json:"status"`           // ok, invalid or skipped
	Summary  string   `json:"summary,omitempty"`
	Errors   []string `json:"errors,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// header is what validate reads of every document to know what it is.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

// readInput returns the files of path ("-" is stdin), a folder's
// *.yaml, *.yml and *.json files as --entries reads them, with their
// contents; a path it cannot read is one failed check.
func readInput(path string, stdin io.Reader) (files []string, data [][]byte, bad *check) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, nil, failed("-", "", fmt.Errorf("read stdin: %w", err))
		}
		return []string{"-"}, [][]byte{b}, nil
	}
	names, err := filesource.Files(path)
	if err == nil && len(names) == 0 {
		err = errors.New("folder holds no *.yaml, *.yml or *.json file")
	}
	if err != nil {
		return nil, nil, failed(path, "", cli.PathError(err))
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, nil, failed(n, "", cli.PathError(err))
		}
		files, data = append(files, n), append(data, b)
	}
	return files, data, nil
}

func failed(file, kind string, errs ...error) *check {
	c := &check{File: file, Kind: kind, Status: "invalid"}
	for _, err := range errs {
		c.Errors = append(c.Errors, strings.Split(err.Error(), "\n")...)
	}
	return c
}

// checkFile checks every document of one file's data as kind says.
func checkFile(file string, data []byte, kind inputKind) []check {
	docs, err := splitDocuments(data)
	if err != nil {
		return []check{*failed(file, "", err)}
	}
	// One document that is not a Kubernetes object is the bare file the
	// control plane reads, empty or not: its own parser says what is wrong.
	if len(docs) <= 1 && kind != kindAny {
		var h header
		if len(docs) == 0 || yaml.Unmarshal(docs[0], &h) != nil || h.Kind == "" {
			return []check{checkBare(file, data, kind)}
		}
	}
	var out []check
	for i, doc := range docs {
		out = append(out, checkDocument(file, i, len(docs), doc, kind)...)
	}
	if len(out) == 0 {
		out = append(out, *failed(file, "", errors.New("file holds no document")))
	}
	return out
}

// splitDocuments splits a YAML stream at its "---" lines, dropping
// documents with nothing but comments.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split documents: %w", err)
		}
		var v any
		if yaml.Unmarshal(doc, &v) == nil && v == nil {
			continue
		}
		docs = append(docs, doc)
	}
}

// checkDocument checks document i of n of file.
func checkDocument(file string, i, n int, doc []byte, kind inputKind) []check {
	var h header
	if err := yaml.Unmarshal(doc, &h); err != nil {
		where := file
		if n > 1 {
			where = fmt.Sprintf("%s (document %d)", file, i)
		}
		return []check{*failed(where, "", fmt.Errorf("decode: %w", err))}
	}
	switch {
	case h.Kind == "" && h.APIVersion == "":
		c := checkBare(file, doc, bareKind(doc, kind))
		if n > 1 {
			c.Object = fmt.Sprintf("document %d", i)
		}
		return []check{c}
	case h.Kind == "ConfigMap":
		return checkConfigMap(file, h, kind)
	case h.Kind == "DNSPolicy":
		return []check{checkPolicy(file, h, doc)}
	}
	return []check{{File: file, Object: objectName(h), Kind: h.Kind, Status: "skipped", Summary: "not a meshdns input"}}
}

// bareKind is what a document without apiVersion and kind holds: what
// its flag says, or for -f what its top-level fields say.
func bareKind(doc []byte, kind inputKind) inputKind {
	if kind != kindAny {
		return kind
	}
	var top map[string]any
	_ = yaml.Unmarshal(doc, &top)
	if _, ok := top["rules"]; ok {
		return kindForwarding
	}
	if _, ok := top["entries"]; ok {
		return kindEntries
	}
	if _, ok := top["zones"]; ok {
		return kindEntries
	}
	return kindAny
}

func objectName(h header) string {
	name := h.Metadata.Name
	if h.Metadata.Namespace != "" {
		name = h.Metadata.Namespace + "/" + name
	}
	if name == "" {
		return h.Kind
	}
	return h.Kind + " " + name
}

// checkConfigMap checks the keys of a ConfigMap the control plane would
// read: its template.yaml and rules.yaml, and the *.yaml keys of an
// entries ConfigMap (one whose keys hold entries lists, or any given
// with --entries). Other ConfigMaps are skipped.
func checkConfigMap(file string, h header, kind inputKind) []check {
	keys := make([]string, 0, len(h.Data))
	for k := range h.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []check
	for _, k := range keys {
		v := h.Data[k]
		var what inputKind = -1
		switch {
		case kind == kindTemplate && (k == templateKey || len(keys) == 1):
			what = kindTemplate
		case kind == kindEntries && isYAMLKey(k):
			what = kindEntries
		case kind == kindAny && k == templateKey:
			what = kindTemplate
		case kind == kindAny && k == forwardingKey:
			what = kindForwarding
		case kind == kindAny && isYAMLKey(k) && (hasTopKey(v, "entries") || strings.HasSuffix(h.Metadata.Name, "entries")):
			what = kindEntries
		}
		if what < 0 {
			continue
		}
		c := checkBare(file, []byte(v), what)
		c.Object = objectName(h) + " key " + k
		out = append(out, c)
	}
	if len(out) == 0 {
		why := "no key meshdns reads"
		if kind != kindAny {
			why = "no key of that input"
		}
		c := check{File: file, Object: objectName(h), Kind: "ConfigMap", Status: "skipped", Summary: why}
		if kind != kindAny {
			c.Status, c.Errors = "invalid", []string{"ConfigMap has " + why}
		}
		out = append(out, c)
	}
	return out
}

func isYAMLKey(k string) bool {
	return strings.HasSuffix(k, ".yaml") || strings.HasSuffix(k, ".yml") || strings.HasSuffix(k, ".json")
}

func hasTopKey(doc, key string) bool {
	var top map[string]any
	if yaml.Unmarshal([]byte(doc), &top) != nil {
		return false
	}
	_, ok := top[key]
	return ok
}
