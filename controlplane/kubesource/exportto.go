package kubesource

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationExportTo on a Service limits the namespaces whose pods see its
// name: a comma-separated list of namespaces, "." for the service's own
// namespace, "*" for every namespace. The service's own namespace always
// sees it (hiding a service from its own pods has no use and would break
// them). Without the annotation, or with an empty value, every namespace
// sees the service. Values that are not namespace names are ignored and
// logged; if none is left, only the own namespace sees the service (an
// unreadable restriction fails closed).
//
// The meaning follows Istio's networking.istio.io/exportTo, so a service
// that uses both reads the same way.
const AnnotationExportTo = "meshdns.io/export-to"

// parseExportTo returns the sorted namespaces that may see a service in
// namespace own, or nil for every namespace; bad holds the ignored values.
func parseExportTo(v, own string) (namespaces, bad []string) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	namespaces = []string{own}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == "*":
			return nil, bad
		case f == ".":
			// own is already in the list
		case len(validation.IsDNS1123Label(f)) == 0:
			namespaces = append(namespaces, f)
		default:
			bad = append(bad, f)
		}
	}
	slices.Sort(namespaces)
	return slices.Compact(namespaces), bad
}
