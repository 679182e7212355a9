GO ?= go

.PHONY: all build test test-short deps bench fuzz mutate

all: build

# The gateway and, beside it, the sandbox server alone, into $(BINDIR): the
# one way to get the binary, which the gateway image reuses
# (deployments/gateway-image/build.sh, the root Dockerfile). scripts/build.sh
# holds the flags (static, -trimpath, stripped, VERSION and REVISION stamped
# for gateway --version) and shows progress: a first build on empty Go caches
# takes minutes.
# Empty VERSION and REVISION: the script's git describe and commit, run
# after it has said what it is doing.
VERSION ?=
REVISION ?=
BINDIR ?= bin
BUILD := GO="$(GO)" BINDIR="$(BINDIR)" VERSION="$(VERSION)" REVISION="$(REVISION)" ./scripts/build.sh

build:
	@$(BUILD)

# README command 1: make build, then the gateway on its embedded defaults
# (embedded Redis, process backend, data in ./.sandgate, 127.0.0.1:8080);
# ARGS are serve's flags, e.g. make run ARGS="--config sandgate.yaml".
ARGS ?=
.PHONY: run
run:
	@$(BUILD) && exec $(BINDIR)/gateway $(ARGS)

# The Python sandbox image (Debian bookworm: python3, pip, venv, node, npm,
# git, curl, build tools) built offline with mmdebstrap, no registry; prints
# its tag and the `docker save` archive for process_image. Cached in
# ~/.cache/sandgate by package list: ~2 min cold, under a second warm.
.PHONY: sandbox-image
sandbox-image:
	./scripts/sandbox-image.sh

deps:
	./scripts/install-deps.sh
	./scripts/kube-test-bins.sh >/dev/null  # etcd, kube-apiserver, kubectl and the node's kubelet, scheduler, controller-manager, cached by version in ~/.cache/sandgate (~8 min cold)

# Every fuzz target for a few seconds on top of its committed corpus
# (testdata/fuzz, which the plain run below also replays), then the whole
# suite against real services (redis-server, this machine's Docker engine)
# through scripts/testreport: go test's lines per package, the output of
# failed tests, the skipped tests by name, and a closing
# "N passed, N failed, N skipped". Under CI=true a missing service fails
# instead of skipping, and any skipped test fails the run.
# TEST_TIMEOUT bounds each package's test binary (go test -timeout is per
# package), so a hang fails that package by the names of the tests still
# running and costs minutes, not the run. Measured on the 2-core machine:
# test/e2e, the largest, 83 s warm at load ~20 and 7.8 min at load ~30 with
# the gateway build its binary does first; test/deploy's longest own wait is
# 8 min (an image build).
TEST_TIMEOUT ?= 15m
test: deps
	$(GO) vet ./...
	./scripts/fuzz.sh 5s
	$(GO) build -o bin/testreport ./scripts/testreport
	./bin/testreport -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# What ships for deployment, checked offline with real tools (test/deploy):
# the gateway image built from a host binary and run next to a real Redis,
# proxying an exec to a sandbox container it creates; compose.yaml with
# .env.example through docker-compose (and the compose plugin if present);
# the nginx config in a real nginx; the kustomize base and overlays rendered
# by kubectl and applied with --dry-run=server to a real kube-apiserver.
# CI=true: a missing tool fails the check instead of skipping it.
.PHONY: validate-deploy
validate-deploy: deps
	CI=true $(GO) test -race -count=1 -timeout 20m ./test/deploy/

test-short:
	$(GO) test -race -short ./...

# Every fuzz target (scripts/fuzz.sh finds each func Fuzz* in a _test.go
# file) for FUZZTIME each, on top of its committed corpus; e.g.
# make fuzz FUZZTIME=10m for a serious run of the parsers' targets
# (internal/serve FuzzDifferential compares serve's head parser with
# net/http's). FUZZSAVE=save copies what the fuzzer found interesting into
# testdata/fuzz, the corpus plain go test replays.
FUZZTIME ?= 10s
FUZZSAVE ?=
fuzz:
	./scripts/fuzz.sh $(FUZZTIME) $(FUZZSAVE)

# Mutation testing (gremlins, pinned and cached in ~/.cache/sandgate) of the
# boundary packages, one at a time, each against its own tests with real
# redis-server: statedb, egress, checkpoint, pool, jail, sandbox. Not part of
# `make test`: it takes hours on the 2-core machine (statedb alone has ~350
# mutants at ~30 s each). MUTATE_PKGS narrows it, e.g.
# make mutate MUTATE_PKGS=./internal/egress; survivors are triaged in
# docs/TESTING.md.
MUTATE_PKGS ?=
mutate:
	./scripts/install-deps.sh
	./scripts/mutate.sh $(MUTATE_PKGS)

# Every benchmark suite, then docs/BENCHMARKS.md, its Goals table and
# docs/bench-latency.png regenerated. Bounded to 32 minutes in all: the
# harness stops its suites after 30 (-timeout; a full run takes about 15 on
# the 2-core machine, plus about 8 for the scale suite's 1 M records on two
# Redis configurations) and writes the doc from what finished, which leaves
# the builds before and the cleanup after their 2 minutes. `build` first:
# the harness builds its own gateway binary with scripts/build.sh too,
# which is then a cache hit instead of a cold compile inside the bound.
bench: build
	./scripts/install-deps.sh
	$(GO) build ./...
	$(GO) run ./bench -timeout 30m

# The same with short runs and fewer samples (about 8 minutes on a quiet
# machine), into a scratch directory, so the committed figures stay as they
# are. Its bound leaves room for a machine busy with other work.
BENCH_QUICK ?= /tmp/sandgate-bench-quick
.PHONY: bench-quick
bench-quick: build
	./scripts/install-deps.sh
	$(GO) build ./...
	$(GO) run ./bench -quick -timeout 15m -out $(BENCH_QUICK)/results -doc $(BENCH_QUICK)/BENCHMARKS.md
