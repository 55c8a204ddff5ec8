# pugfs: mount a pugmark bucket as a directory tree.
#   make run    build, write a demo bucket into ./demo-bucket, mount it at ./mnt
#   make test   install test dependencies, vet, staticcheck, go test -race ./...
#   make soak   random exploration: property-test seeds, the long soak and
#               the decoder fuzzers; SOAK_SEEDS (default 100) seeds at
#               SOAK_OPS (default 400), FUZZTIME (default 2m) per fuzzer
#   make bench  pugfs against the native disk and other FUSE mounts;
#               BENCH=full for the goal sizes, BENCH=remote for S3 20 ms away
#               against rclone mount (rclone from apt-get, root)

GO        ?= go
BIN       := bin/pugfs
TOOLS     := $(CURDIR)/.tools/bin
DEMO      ?= $(CURDIR)/demo-bucket
MNT       ?= $(CURDIR)/mnt
TESTFLAGS ?=
export PUGFS_TOOLS := $(TOOLS)

SOAK_SEEDS ?= 100
SOAK_OPS   ?= 400
FUZZTIME   ?= 2m
# The fuzzers of what pugfs parses from a bucket (a failure's input lands in
# layout/testdata/fuzz/, which `make test` then replays).
FUZZERS    := FuzzDescriptorDecoderOracle FuzzReliabilityStreamedDecode FuzzDecodeDescriptors FuzzDescriptorJSON

.PHONY: build run test lint bench soak deps clean

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
	$(GO) test -race -timeout 60m $(TESTFLAGS) ./...

# Random seeds never run in make test (CI is deterministic). A seed that
# fails here is replayed with PUGFS_PROPERTY_SEED and becomes a fixed case
# in relPropertySeeds (test/reliability_property_test.go).
soak: deps
	PUGFS_PROPERTY_RANDOM=$(SOAK_SEEDS) PUGFS_PROPERTY_OPS=$(SOAK_OPS) \
		$(GO) test -count=1 -timeout 24h -parallel 4 -run 'TestReliabilityPropertyRandomOps$$' ./test/
	PUGFS_SOAK=1 $(GO) test -race -count=1 -timeout 30m -run 'TestReliabilitySoak$$|TestReliabilityCrashDuringWriteStorm$$' ./test/
	for f in $(FUZZERS); do $(GO) test -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./layout/ || exit 1; done

bench: build deps
	$(GO) build -o bin/pugfs-bench ./cmd/pugfs-bench
	./bin/pugfs-bench -preset $(or $(BENCH),quick) -pugfs $(BIN)

clean:
	rm -rf bin
