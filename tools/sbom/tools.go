//go:build tools

// Package sbom pins the SBOM generator `make release` runs, in a module of
// its own so that its dependencies do not move the code generators' pins
// in ../go.mod.
package sbom

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
)
