GO ?= go

.PHONY: all build test test-short deps bench fuzz

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/gateway ./cmd/gateway

deps:
	./scripts/install-deps.sh test
	./scripts/kube-test-bins.sh >/dev/null  # kube-apiserver + etcd, cached in .cache/kube (~6.5 min cold)

# The whole suite against real services (redis-server, this machine's Docker
# engine). Under CI=true a missing service fails instead of skipping.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

test-short:
	$(GO) test -race -short ./...

fuzz:
	./scripts/fuzz.sh 10s

bench:
	./scripts/install-deps.sh bench
	$(GO) run ./bench
