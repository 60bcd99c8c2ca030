package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/controlplane/filesource"
	"github.com/meshdns/meshdns/controlplane/forwardsource"
	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/controlplane/webhook"
)

// checkBare checks data as the file the control plane reads for kind.
func checkBare(file string, data []byte, kind inputKind) check {
	switch kind {
	case kindEntries:
		return checkEntries(file, data)
	case kindTemplate:
		t, err := webhook.ParseTemplate(data)
		if err != nil {
			return *failed(file, "inject-template", err)
		}
		image := t.Image
		if image == "" {
			image = "the control plane's --inject-image"
		}
		return check{File: file, Kind: "inject-template", Status: "ok", Summary: "injection template, image " + image}
	case kindForwarding:
		rules, err := forwardsource.ParseFile(data)
		if err != nil {
			return *failed(file, "forwarding-rules", err)
		}
		return check{File: file, Kind: "forwarding-rules", Status: "ok", Summary: fmt.Sprintf("%d forwarding rules", len(rules))}
	}
	return *failed(file, "", errors.New("neither a Kubernetes object nor an entries or forwarding file (an injection template: give it with --inject-template)"))
}

func checkPolicy(file string, h header, doc []byte) check {
	c := check{File: file, Object: objectName(h), Kind: "DNSPolicy", Status: "ok"}
	j, err := yaml.YAMLToJSON(doc)
	if err == nil {
		var p policysource.Policy
		if p, err = policysource.FromJSON(j); err == nil {
			c.Summary = fmt.Sprintf("%d rules", len(p.DNS.Rules))
			return c
		}
	}
	c.Status = "invalid"
	c.Errors = strings.Split(err.Error(), "\n")
	return c
}

// checkEntries checks an entries file with the control plane's parser.
// That parser stops at the first value of a wrong type, and its message
// names a Go type rather than the entry; then each entry is checked on
// its own so that every fault of the file is listed with its entry.
func checkEntries(file string, data []byte) check {
	es, zones, err := filesource.Parse(data)
	if err == nil {
		c := check{File: file, Kind: "entries", Status: "ok", Summary: fmt.Sprintf("%d entries, %d zones", len(es), len(zones))}
		c.Warnings = publicWarnings(es)
		return c
	}
	c := failed(file, "entries", err)
	if strings.HasPrefix(err.Error(), "decode: ") {
		if errs := entryErrors(data); len(errs) > 0 {
			c.Errors = errs
		}
	}
	return *c
}

// entryErrors checks the top-level fields, the zones and each entry of
// data on their own; nil when it cannot split data that way.
func entryErrors(data []byte) []string {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(j, &top) != nil {
		return nil
	}
	var errs []string
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "entries" && k != "zones" {
			errs = append(errs, fmt.Sprintf("unknown field %q (want entries and zones)", k))
		}
	}
	if z, ok := top["zones"]; ok {
		if _, _, err := filesource.Parse([]byte(`{"entries":[],"zones":` + string(z) + `}`)); err != nil {
			errs = append(errs, "zones: "+typeError(err))
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(top["entries"], &items); err != nil {
		return append(errs, "entries: not a list")
	}
	for i, it := range items {
		_, _, err := filesource.Parse([]byte(`{"entries":[` + string(it) + `]}`))
		if err == nil {
			continue
		}
		var named struct {
			Hostname any `json:"hostname"`
		}
		_ = json.Unmarshal(it, &named)
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(line, "decode: ") {
				line = fmt.Sprintf("entries[0] %q: %s", fmt.Sprint(named.Hostname), typeError(errors.New(line)))
			}
			errs = append(errs, strings.Replace(line, "entries[0]", fmt.Sprintf("entries[%d]", i), 1))
		}
	}
	return errs
}

var (
	typeErrorRE    = regexp.MustCompile(`cannot unmarshal (.+) into Go struct field \w+\.(?:entries\.)?(\S+) of type (\S+)`)
	unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)
)

// typeError words a decode error of the strict YAML decoder for people:
// the field and what it wants rather than the Go type it lands in.
func typeError(err error) string {
	msg := err.Error()
	if m := typeErrorRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s: %s is not a valid %s", m[2], m[1], goTypeWord(m[3]))
	}
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown field %q", m[1])
	}
	if _, after, ok := strings.Cut(msg, "json: "); ok {
		return after
	}
	return strings.TrimPrefix(msg, "decode: ")
}

func goTypeWord(t string) string {
	switch {
	case strings.HasPrefix(t, "uint"):
		return "whole number of 0 or more"
	case strings.HasPrefix(t, "int"):
		return "whole number"
	case t == "string":
		return "string"
	case strings.HasPrefix(t, "[]"):
		return "list"
	}
	return t
}
