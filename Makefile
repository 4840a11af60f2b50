# Sluice. `make demo` runs the main job; `make test` runs everything CI runs.
GO       ?= go
FUZZTIME ?= 10s
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

# Fuzz targets as package:Target; each runs for FUZZTIME in `make test`.
FUZZ_TARGETS = ./fabric/tcp:FuzzDecodeFrame ./fabric/tcp:FuzzServe ./fabric/internal/handshake:FuzzHandshake ./shmring:FuzzRingFromPeer ./shmring:FuzzControlFrame

.PHONY: all build test unit fuzz lint demo bench clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/sluice ./cmd/sluice

# The RDMA transport (fabric/verbs) builds with -tags verbs and needs
# libibverbs-dev. CI sets VERBS=required; elsewhere it is checked when the
# headers are installed and skipped with a warning when not.
VERBS ?= auto
HAVE_VERBS := $(shell test -f /usr/include/infiniband/verbs.h && echo yes)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
ifeq ($(HAVE_VERBS),yes)
	$(GO) vet -tags verbs ./...
else ifeq ($(VERBS),required)
	@echo "libibverbs-dev is not installed (apt-get install libibverbs-dev)"; exit 1
else
	@echo "WARNING: libibverbs-dev not installed: fabric/verbs not compiled (apt-get install libibverbs-dev)"
endif

unit:
	$(GO) test -race -timeout 20m ./...
	# the agent's million-entry two-process run, at full size without -race
	$(GO) test -run '^TestAgentTwoProcesses$$' ./sdk/
ifeq ($(HAVE_VERBS),yes)
	$(GO) test -race -tags verbs ./fabric/verbs/
endif

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	done

test: lint build unit fuzz

demo: build
	./bin/sluice demo

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 3 ./fabric/...
	$(GO) test -run '^$$' -bench BenchmarkLoader -benchtime 200x -count 3 ./dataset/

clean:
	rm -rf bin
