#!/usr/bin/env bash
# make release: one version everywhere. Builds into $RELEASE_DIR the image
# tarball, the packaged chart, static meshdns and meshdns-agent binaries for
# linux/amd64 and linux/arm64, a CycloneDX SBOM per binary (cyclonedx-gomod,
# pinned in tools/sbom/go.mod) and SHA256SUMS over all of them.
#
# It refuses a VERSION other than the newest CHANGELOG.md heading's, found
# by the rule of docs/docs_test.go (the first "## [" line, its first x.y.z),
# and runs that test (TestOneVersion) so the chart, the install and the
# pages name the same version before anything is built.
#
# Inputs (the Makefile passes them): VERSION, RELEASE_DIR, BIN, IMAGE_DIR,
# PLATFORMS, GO, HELM, MAKE.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VERSION:?VERSION=vX.Y.Z is required}" "${RELEASE_DIR:?}" "${BIN:?}" "${IMAGE_DIR:?}"
GO=${GO:-go}
MAKE=${MAKE:-make}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
HELM=${HELM:-$HOME/.cache/meshdns/helm/helm}

newest=$(grep -m1 '^## \[' CHANGELOG.md | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
if [ -z "$newest" ]; then
  echo "make release: the newest CHANGELOG.md heading names no version" >&2
  exit 2
fi
if [ "$VERSION" != "v$newest" ]; then
  echo "make release: VERSION=$VERSION is not v$newest, the newest CHANGELOG.md version: name the release in CHANGELOG.md first" >&2
  exit 2
fi
"$GO" test -count=1 -run '^TestOneVersion$' ./docs >/dev/null || {
  echo "make release: the places that name the version disagree: go test -run TestOneVersion ./docs" >&2
  exit 2
}
command -v "$HELM" >/dev/null || { echo "make release: no helm at $HELM (make deps builds it; HELM=path picks another)" >&2; exit 2; }

rm -rf "$RELEASE_DIR"
mkdir -p "$RELEASE_DIR"

# The image's build leaves the static binaries (CGO_ENABLED=0, -trimpath,
# stamped with VERSION) in $IMAGE_DIR/<os>_<arch>/: the release ships those
# very files, so the binaries and the image's are the same bytes.
"$MAKE" --no-print-directory image VERSION="$VERSION" BIN="$BIN" PLATFORMS="$PLATFORMS"
cp "$IMAGE_DIR/meshdns.tar" "$RELEASE_DIR/meshdns-$VERSION-image.tar"
for p in $PLATFORMS; do
  for cmd in meshdns meshdns-agent; do
    cp "$IMAGE_DIR/${p/\//_}/$cmd" "$RELEASE_DIR/$cmd-$VERSION-${p/\//-}"
  done
done

"$HELM" package charts/meshdns --version "${VERSION#v}" --app-version "$VERSION" -d "$RELEASE_DIR" >/dev/null

# One SBOM per shipped binary, read from the module list the Go linker
# embeds in it (go version -m): the modules in exactly that file.
"$MAKE" --no-print-directory "$BIN/cyclonedx-gomod" BIN="$BIN"
for p in $PLATFORMS; do
  for cmd in meshdns meshdns-agent; do
    f="$RELEASE_DIR/$cmd-$VERSION-${p/\//-}"
    "$BIN/cyclonedx-gomod" bin -json -version "$VERSION" -output "$f.cdx.json" "$f"
  done
done

(cd "$RELEASE_DIR" && sha256sum -- * > SHA256SUMS)
echo "make release: $VERSION in $RELEASE_DIR"
ls -1 "$RELEASE_DIR"
