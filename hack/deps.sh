#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: network and
# DNS tools from apt, kube-apiserver + etcd (built by get-kube.sh) into
# $KUBE_ASSETS and CoreDNS into $COREDNS_DIR, both kept between runs where the
# machine keeps $HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_ASSETS=${KUBE_ASSETS:-$HOME/.cache/meshdns/kube}

pkgs=()
need() { command -v "$1" >/dev/null 2>&1 || pkgs+=("$2"); }
need iptables iptables
need nft nftables
need ip iproute2
need dig bind9-dnsutils
need kdig knot-dnsutils
need dnsperf dnsperf
# the memory benchmark's reference server; -base is the binary without a system service on port 53
need dnsmasq dnsmasq-base
# a real DNS-over-TLS server for the upstream tests (tls-service-key/pem)
need unbound unbound
need getent libc-bin
# musl's resolver in the DNS policy test: a tiny getaddrinfo client built with musl-gcc
need musl-gcc musl-tools
need taskset util-linux
need openssl openssl
# promtool checks and unit-tests the shipped alert rules, and prometheus runs
# them and the dashboard on real scrapes (examples/monitoring)
need promtool prometheus
# the real-node tests: a container runtime, CNI plugins, and a static busybox for test images
need containerd containerd
need runc runc
[ -x /usr/lib/cni/bridge ] || pkgs+=(containernetworking-plugins)
[ -x /bin/busybox ] || pkgs+=(busybox-static)
if [ ${#pkgs[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
# The differential test's referee: CoreDNS at a pinned release, built from the
# Go module proxy (about 8 minutes on 2 cores) unless the cached binary is that release.
COREDNS_VERSION=v1.14.7
COREDNS_DIR=${COREDNS_DIR:-$HOME/.cache/meshdns/coredns}
if ! "$COREDNS_DIR/coredns" -version 2>/dev/null | grep -qx "CoreDNS-${COREDNS_VERSION#v}"; then
  GOBIN="$COREDNS_DIR" go install "github.com/coredns/coredns@$COREDNS_VERSION"
fi
# The dnstap reader of golang-dnstap: the agent's dnstap tests have it read the
# agent's stream (unix socket and TCP). Built from the Go module proxy once
# (~1 min) and kept; the stamp file names the version.
DNSTAP_VERSION=v0.4.0
DNSTAP_DIR=${DNSTAP_DIR:-$HOME/.cache/meshdns/dnstap}
if ! [ -x "$DNSTAP_DIR/dnstap" ] || [ "$(cat "$DNSTAP_DIR/.version" 2>/dev/null)" != "$DNSTAP_VERSION" ]; then
  mkdir -p "$DNSTAP_DIR"
  GOBIN="$DNSTAP_DIR" go install "github.com/dnstap/golang-dnstap/dnstap@$DNSTAP_VERSION"
  echo "$DNSTAP_VERSION" > "$DNSTAP_DIR/.version"
fi
# iptables-legacy and iptables-nft are both tested; Debian's iptables package ships both.
./hack/get-kube.sh "$KUBE_ASSETS"
# helm for the chart's tests (charts/meshdns: lint, render against the
# kustomize base, install/upgrade/uninstall). Built from the Go module proxy
# once and kept beside the kube binaries; a present binary of the pinned
# version is not rebuilt, so warm CI runs spend nothing here (cold: ~3 min).
HELM_VERSION=${HELM_VERSION:-v3.18.6}
HELM_DIR=${HELM_DIR:-$HOME/.cache/meshdns/helm}
# (go install leaves helm's own version string unset: a stamp file says
# which version the binary is.)
if ! [ -x "$HELM_DIR/helm" ] || [ "$(cat "$HELM_DIR/.version" 2>/dev/null)" != "$HELM_VERSION" ]; then
  mkdir -p "$HELM_DIR"
  GOBIN="$HELM_DIR" timeout 1200 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
    GOBIN="$HELM_DIR" timeout 1200 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" > "$HELM_DIR/.version"
fi
