package main

import (
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// publicWarnings warns of each name of entries (hostname, alias,
// wildcard) that is a public name, one ending in a top-level domain of
// the Public Suffix List: every agent that sees the entry answers it
// instead of the public DNS. That may be the intent (an internal address
// for a public host), so it is a warning, not an error. Services cannot
// do this: agents answer a Service's svc.ns or svc form that ends in a
// top-level domain only under the pod's search domains (pkg/nametable,
// Answer rules).
func publicWarnings(entries []registry.Entry) []string {
	var out []string
	for _, e := range entries {
		for _, name := range append([]string{e.Hostname}, e.AltHosts...) {
			if tld, ok := publicTLD(name); ok {
				out = append(out, fmt.Sprintf("%q overrides a public name (.%s is a top-level domain) for every agent that sees it", name, tld))
			}
		}
	}
	return out
}

// publicTLD returns the last label of name when it is a top-level domain
// of the Public Suffix List's ICANN section.
func publicTLD(name string) (string, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	tld := name[strings.LastIndexByte(name, '.')+1:]
	_, icann := publicsuffix.PublicSuffix(tld)
	return tld, icann
}
