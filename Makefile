# meshdns — run `make` for the list of targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
KUBE_ASSETS ?= $(HOME)/.cache/meshdns/kube
export KUBE_ASSETS
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.revision=$(REVISION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## show this help
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The sidecar's binary (bin/meshdns-agent, commands agent and version):
# every pod maps its pages, so its package leaves out the control plane and
# the build leaves out cgo (libc's pages) and the symbol table and DWARF
# (-s -w: the file only; stack traces come from the pclntab, which stays).
# internal/archtest checks AGENT_PKG and AGENT_BUILD against what the
# sidecar must not link.
AGENT_PKG := ./cmd/meshdns-agent
AGENT_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)"

.PHONY: build
build: ## build bin/meshdns and bin/meshdns-agent (the sidecar's small build: agent and version only)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/meshdns ./cmd/meshdns
	$(AGENT_BUILD) -o $(BIN)/meshdns-agent $(AGENT_PKG)

IMAGE ?= ghcr.io/meshdns/meshdns
PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIR := $(BIN)/image

.PHONY: image
image: ## build the meshdns image (meshdns and the sidecar's meshdns-agent, static, linux/amd64+arm64, empty base): $(IMAGE_DIR)/oci and $(IMAGE_DIR)/meshdns.tar
	@rm -rf $(IMAGE_DIR) && mkdir -p $(IMAGE_DIR)
	@for p in $(PLATFORMS); do \
	  echo "go build $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(IMAGE_DIR)/$${p/\//_}/meshdns ./cmd/meshdns || exit 1; \
	  GOOS=$${p%/*} GOARCH=$${p#*/} $(AGENT_BUILD) -o $(IMAGE_DIR)/$${p/\//_}/meshdns-agent $(AGENT_PKG) || exit 1; \
	done
	$(GO) run ./hack/image -name $(IMAGE):$(VERSION) -revision "$(REVISION)" \
	  $(foreach p,$(PLATFORMS),-binary $(p)=$(IMAGE_DIR)/$(subst /,_,$(p))/meshdns -agent-binary $(p)=$(IMAGE_DIR)/$(subst /,_,$(p))/meshdns-agent) \
	  -layout $(IMAGE_DIR)/oci -archive $(IMAGE_DIR)/meshdns.tar

RELEASE_DIR ?= $(BIN)/release
HELM ?= $(HOME)/.cache/meshdns/helm/helm

.PHONY: release
release: ## make release VERSION=vX.Y.Z (the newest CHANGELOG.md version): image tarball, chart, linux amd64/arm64 binaries, SBOMs, SHA256SUMS into $(RELEASE_DIR)
	GO=$(GO) MAKE=$(MAKE) VERSION=$(VERSION) BIN=$(BIN) IMAGE_DIR=$(IMAGE_DIR) RELEASE_DIR=$(RELEASE_DIR) PLATFORMS="$(PLATFORMS)" HELM=$(HELM) ./hack/release.sh

# The SBOM generator, pinned in a module of its own (tools/sbom/go.mod).
$(BIN)/cyclonedx-gomod: tools/sbom/go.mod
	cd tools/sbom && GOBIN=$(abspath $(BIN)) $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

# make run forwards the names outside the sample table to this machine's
# own resolvers: the nameservers of RUN_RESOLV_CONF, passed as --upstream,
# while examples/resolv.conf gives the demo pod's search list and ndots.
# RUN_UPSTREAMS=IP[:port],... picks others.
RUN_RESOLV_CONF ?= /etc/resolv.conf
comma := ,
RUN_UPSTREAMS ?= $(shell awk '$$1 == "nameserver" { print $$2 }' $(RUN_RESOLV_CONF) 2>/dev/null | paste -sd, -)

.PHONY: run
run: build run-upstreams ## run the agent on the sample table (examples/nametable.json), forwarding other names to this machine's resolvers; dig @127.0.0.1 -p 15053 web.demo
	$(BIN)/meshdns agent --nametable-file examples/nametable.json --namespace demo --resolv-conf examples/resolv.conf --upstream $(RUN_UPSTREAMS)

# Says which upstreams make run forwards to and asks each one question
# (dig, 2 s), so a demo whose resolvers are unreachable says so before it
# starts rather than timing out on every outside name.
.PHONY: run-upstreams
run-upstreams: ## say which upstreams make run forwards to, and whether each answers
	@test -n "$(RUN_UPSTREAMS)" || { echo "make run: no nameserver in $(RUN_RESOLV_CONF); set RUN_UPSTREAMS=IP[:port]"; exit 2; }
	@echo "make run: names outside the table go to $(RUN_UPSTREAMS) (from $(RUN_RESOLV_CONF))"
	@command -v dig >/dev/null || { echo "make run: no dig on PATH, the upstreams are not checked"; exit 0; }; \
	for u in $(subst $(comma), ,$(RUN_UPSTREAMS)); do \
	  case $$u in \[*\]:*) h=$${u%\]:*}; h=$${h#\[}; p=$${u##*:};; *.*:*) h=$${u%:*}; p=$${u##*:};; *) h=$$u; p=53;; esac; \
	  dig +time=2 +tries=1 -p $$p @$$h . NS >/dev/null 2>&1 \
	    || echo "make run: upstream $$u does not answer (dig -p $$p @$$h . NS): names outside the table will fail; set RUN_UPSTREAMS=IP[:port]"; \
	done

.PHONY: deps
deps: ## install what the tests need (apt packages, kube-apiserver + etcd into $(KUBE_ASSETS))
	./hack/deps.sh

.PHONY: test
test: deps ## install test dependencies, then run every test with the race detector
	$(GO) test -race -count=1 -timeout 45m ./...

DIFFTEST_SERVICES ?= 1000
DIFFTEST_SEED ?= 1
DIFFTEST_OPTION_SERVICES ?= 300
.PHONY: difftest
difftest: deps ## the differential test against CoreDNS on a larger cluster (DIFFTEST_SERVICES=1000, DIFFTEST_OPTION_SERVICES=300, DIFFTEST_SEED=1)
	DIFFTEST_SERVICES=$(DIFFTEST_SERVICES) DIFFTEST_OPTION_SERVICES=$(DIFFTEST_OPTION_SERVICES) DIFFTEST_SEED=$(DIFFTEST_SEED) $(GO) test -count=1 -timeout 30m -v -run TestDifferential ./e2e/difftest/

.PHONY: test-unit
test-unit: ## run the tests without installing anything (integration tests skip outside CI)
	$(GO) test -race -count=1 ./...

.PHONY: lint
lint: tidy-check $(BIN)/buf ## go vet + gofmt check + go mod tidy check + buf lint
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/buf lint

# go mod tidy -diff prints what tidy would change and exits 1 if anything:
# a module imported directly but listed as indirect, a sum missing or stale.
.PHONY: tidy-check
tidy-check: ## fail if go.mod/go.sum are not tidy (go mod tidy -diff)
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit"; exit 1; }

.PHONY: docs
docs: ## regenerate the command reference docs/cli.md from the commands' --help
	$(GO) test -count=1 -run '^TestCLIReference$$' ./cmd/meshdns -args -update-cli-doc

.PHONY: fmt
fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

.PHONY: tools
tools: ## build the pinned code generators into bin/ (from tools/go.mod)
	cd tools && GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

$(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc:
	$(MAKE) tools

.PHONY: proto
proto: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## lint the protos and regenerate the Go code
	$(BIN)/buf lint
	$(BIN)/buf generate

.PHONY: proto-check
proto-check: proto ## fail when the committed generated code is stale
	@git diff --exit-code -- proto || { echo "generated code is stale: run make proto and commit"; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard proto)" || { echo "untracked generated files in proto/"; exit 1; }

FUZZTIME ?= 20s
.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (CI: 2s) and report every failure
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./hack/fuzz.sh

.PHONY: bench
bench: ## run the Go benchmarks (-benchmem)
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: bench-dns
bench-dns: build ## measure the DNS data plane against a UDP reflector and unbound with dnsperf (needs dnsperf, taskset; BENCH_DNS_BASE=old agent binary: A/B against it)
	$(GO) build -o $(BIN)/benchdns ./hack/benchdns
	$(BIN)/benchdns $(if $(BENCH_DNS_BASE),-ab $(BENCH_DNS_BASE)$(comma)$(BIN)/meshdns-agent) $(BENCHDNS_FLAGS)

.PHONY: bench-memory
bench-memory: build ## agent RSS, peak and ready time at 1k/10k/100k names, file and stream, beside dnsmasq (needs dnsperf, dnsmasq)
	$(GO) build -o $(BIN)/benchdns ./hack/benchdns
	$(BIN)/benchdns memory $(BENCHMEM_FLAGS)

# The churn of a 100,000-pod cluster (3 replicas) against one replica of
# bin/meshdns controlplane; bounded: 1,000 agents and a minute of churn by
# default (hack/churn/README.md has the rates and their sources).
CHURN_FLAGS ?=
.PHONY: bench-churn
bench-churn: build ## churn (Service, endpoint and pod changes of a 100,000-pod cluster) against bin/meshdns controlplane: CPU, RSS, ACK latency, coalescing; CHURN_FLAGS="-agents 10000 -tls"
	$(GO) build -o $(BIN)/churn ./hack/churn
	$(BIN)/churn -meshdns $(BIN)/meshdns $(CHURN_FLAGS)

NDOTS_FLAGS ?=
.PHONY: bench-ndots
bench-ndots: build ## the ndots:5 walk of an outside name from a pod (glibc, musl), with and without meshdns: queries to CoreDNS, time (root; CoreDNS from make deps, musl-gcc, dig)
	$(GO) run ./hack/ndotsbench -meshdns $(BIN)/meshdns-agent $(NDOTS_FLAGS)

.PHONY: e2e
e2e: ## end-to-end tests only: network namespaces, real iptables, real kube-apiserver (root)
	$(GO) test -count=1 -v ./e2e/
