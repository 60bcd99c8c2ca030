package nametable

import (
	"strings"

	"golang.org/x/net/publicsuffix"
)

// A Kubernetes alternate name can be someone's public name: a Service
// google in a namespace com has the svc.ns form google.com, and one named
// dev in the pod's own namespace the bare form dev. Under a search domain
// of the cluster (google.com.<ns>.svc.cluster.local, the resolver's walk)
// such a form is the cluster's to answer, but asked as written it is the
// public name, which kube-dns and CoreDNS never answer from the cluster.
// So a form whose last label is a top-level domain answers only under a
// search domain; every other form (a namespace demo: no public name ends
// in .demo) still answers as written, which hosts without the cluster's
// search domains (a VM's agent) rely on. Top-level domains are those of
// the Public Suffix List's ICANN section as golang.org/x/net/publicsuffix
// ships it.
//
// The check is made once per service when it is added (a node flag), not
// per question: the list's lookup costs microseconds.

// publicForm is the flag that keeps findAlt's i-th form (bare, svc.ns,
// svc.ns.svc) from answering as asked; svc.ns.svc ends in svc, which is
// no top-level domain.
var publicForm = [...]uint8{flagPublicShort, flagPublicNS, 0}

// publicForms returns the flags of the Kubernetes service e's alternate
// forms that end in a top-level domain.
func (b *builder) publicForms(e *Entry) uint8 {
	// By namespace as given: lowering and cutting it for isTLD was half
	// the cost, per service.
	f, ok := b.nsForms[e.Namespace]
	if !ok {
		if b.isTLD(lastLabel(e.Namespace)) {
			f = flagPublicNS
		}
		if b.nsForms == nil {
			b.nsForms = make(map[string]uint8)
		}
		if len(b.nsForms) < maxNamespaceForms {
			b.nsForms[e.Namespace] = f
		}
	}
	// Only services of the pod's namespace have the bare form.
	if strings.EqualFold(e.Namespace, b.pod.Namespace) && b.isTLD(lastLabel(e.ShortName)) {
		f |= flagPublicShort
	}
	return f
}

// maxNamespaceForms bounds builder.nsForms, should a table have a
// namespace per service.
const maxNamespaceForms = 4096

// isTLD reports whether label is a top-level domain, with a cache: a
// table has few namespaces.
func (b *builder) isTLD(label string) bool {
	label = strings.ToLower(label)
	if v, ok := b.tlds[label]; ok {
		return v
	}
	_, icann := publicsuffix.PublicSuffix(label)
	if b.tlds == nil {
		b.tlds = make(map[string]bool)
	}
	b.tlds[label] = icann
	return icann
}

// lastLabel is the last label of name.
func lastLabel(name string) string {
	name = strings.TrimSuffix(name, ".")
	return name[strings.LastIndexByte(name, '.')+1:]
}
