# pugfs: mount a pugmark bucket as a directory tree.
#   make run    build, write a demo bucket into ./demo-bucket, mount it at ./mnt
#   make test   install test dependencies, vet, staticcheck, go test -race ./...

GO        ?= go
BIN       := bin/pugfs
TOOLS     := $(CURDIR)/.tools/bin
DEMO      ?= $(CURDIR)/demo-bucket
MNT       ?= $(CURDIR)/mnt
TESTFLAGS ?=
export PUGFS_TOOLS := $(TOOLS)

.PHONY: build run test lint bench deps clean

build:
	$(GO) build -o $(BIN) ./cmd/pugfs

run: build
	@./scripts/run-demo.sh $(BIN) $(DEMO) $(MNT)

deps:
	@./scripts/test-deps.sh

lint: deps
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

test: lint
	$(GO) test -race -timeout 40m $(TESTFLAGS) ./...

bench: build deps
	$(GO) build -o bin/pugfs-bench ./cmd/pugfs-bench
	./bin/pugfs-bench -preset $(or $(BENCH),quick) -pugfs $(BIN)

clean:
	rm -rf bin
