# Sluice. `make demo` runs the main job; `make test` runs everything CI runs.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

# Fuzz targets as package:Target:execs. Budgets are counts, not durations:
# with a -fuzztime duration, Go 1.26's fuzz coordinator can fail a target
# with a bare "context deadline exceeded" at the deadline under CPU load
# (golang/go#75804, fixed in Go 1.27). Each count is about 10 s here;
# FUZZSCALE multiplies them for longer runs.
FUZZSCALE ?= 1
FUZZ_TARGETS = ./internal/crc32c:FuzzUpdate:200000 ./fabric/tcp:FuzzDecodeFrame:150000 ./fabric/tcp:FuzzServe:60000 ./fabric/internal/handshake:FuzzHandshake:150000 ./shmring:FuzzRingFromPeer:100000 ./shmring:FuzzControlFrame:200000

.PHONY: all build python pytest test unit fuzz lint demo bench bench-peers bench-hosts clean chaos

# The Python tests run in .venv when there is one (.ci/run makes it:
# Debian's python3 and python3-torch, pyarrow and pytest from PyPI).
PYTHON ?= $(shell test -x .venv/bin/python && echo $(CURDIR)/.venv/bin/python || echo python3)

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/sluice ./cmd/sluice

# libsluice.so (+ .h) for the Python package: python/sluice/, where
# `pip install ./python` picks it up.
python:
	$(GO) build -buildmode=c-shared -ldflags "-X main.version=$(VERSION)" -o python/sluice/libsluice.so ./cmd/libsluice

pytest: build python
	cd python && SLUICE_BIN=$(CURDIR)/bin/sluice $(PYTHON) -m pytest -q tests

# The RDMA transport (fabric/verbs) builds with -tags verbs and needs
# libibverbs-dev. CI sets VERBS=required; elsewhere it is checked when the
# headers are installed and skipped with a warning when not.
VERBS ?= auto
HAVE_VERBS := $(shell test -f /usr/include/infiniband/verbs.h && echo yes)

# staticcheck is a Go tool pinned in go.mod (go get -tool ...@version).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
ifeq ($(HAVE_VERBS),yes)
	$(GO) vet -tags verbs ./...
	$(GO) tool staticcheck -tags verbs ./fabric/verbs/
else ifeq ($(VERBS),required)
	@echo "libibverbs-dev is not installed (apt-get install libibverbs-dev)"; exit 1
else
	@echo "WARNING: libibverbs-dev not installed: fabric/verbs not compiled (apt-get install libibverbs-dev)"
endif

# The nemesis suite (internal/nemesis) runs its short seeds here, on the
# binary `build` made.
unit:
	SLUICE_BIN=$(CURDIR)/bin/sluice $(GO) test -race -timeout 20m ./...
	# the agent's million-entry two-process run, at full size without -race
	$(GO) test -run '^TestAgentTwoProcesses$$' ./sdk/
ifeq ($(HAVE_VERBS),yes)
	$(GO) test -race -tags verbs ./fabric/verbs/
endif

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$$(( $${rest##*:} * $(FUZZSCALE) )); \
		echo "fuzz $$name ($$n execs)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${n}x -fuzzminimizetime 100x $$pkg; \
	done

test: lint build unit pytest fuzz

demo: build
	./bin/sluice demo

# Sluice's loaders against pyarrow, Hugging Face datasets, Lance, Mosaic
# Streaming, webdataset and torch over files (benchmarks/peers.py; not in
# CI). Installs the peers into .venv first (see the requirements file for
# why --no-deps); results go to benchmarks/results/.
bench-peers: build python
	@$(PYTHON) -c "import torchvision" 2>/dev/null || apt-get install -y -q python3-torchvision
	$(PYTHON) -m pip install -q --no-deps -r benchmarks/peers-requirements.txt
	$(PYTHON) benchmarks/peers.py

# The nemesis suite's long run: real processes under faults drawn by each
# seed (kills, pauses, meta leader kills, partitions and a full disk need
# root), checked with porcupine per key and offline. A failed seed keeps
# its directory and names it. CHAOS_SCENARIO is "mixed" or a
# comma-separated list of fault kinds (kill-short, kill-long, kill-chain,
# pause, meta-leader, partition, disk-full).
CHAOS_DURATION ?= 10m
CHAOS_SEEDS    ?= 1 2 3
CHAOS_SCENARIO ?= mixed
CHAOS_CLIENTS  ?= 4
chaos: build
	SLUICE_BIN=$(CURDIR)/bin/sluice NEMESIS_DURATION=$(CHAOS_DURATION) NEMESIS_SEEDS="$(CHAOS_SEEDS)" \
		NEMESIS_SCENARIO=$(CHAOS_SCENARIO) NEMESIS_CLIENTS=$(CHAOS_CLIENTS) \
		$(GO) test -count=1 -timeout 0 -run '^TestNemesis$$' -v ./internal/nemesis/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 3 ./fabric/...
	$(GO) test -run '^$$' -bench BenchmarkLoader -benchtime 200x -count 3 ./dataset/

# Issue 17's scale-out and recovery figures on emulated hosts
# (internal/hosts: network namespaces, tbf-capped links; root only, about
# 25 minutes; not in CI). HOSTS_RATE_MB caps each storage host's link;
# the log also goes to benchmarks/results/hosts-DATE.txt. An interrupted
# run removes its namespaces and processes (a killed one, at the next run).
HOSTS_RATE_MB ?= 25
HOSTS_ROUNDS  ?= 5
bench-hosts: build
	@if [ "$$(id -u)" != 0 ]; then echo "bench-hosts needs root (network namespaces, tc)"; exit 1; fi
	SLUICE_BIN=$(CURDIR)/bin/sluice SLUICE_HOSTS_RATE_MB=$(HOSTS_RATE_MB) SLUICE_HOSTS_ROUNDS=$(HOSTS_ROUNDS) bash -o pipefail -c \
		"$(GO) test -count=1 -timeout 90m -run '^$$' -bench '^Benchmark(ScaleOut|Recovery)$$' -benchtime 1x -v ./internal/hosts/ \
		2>&1 | tee benchmarks/results/hosts-$$(date -u +%F).txt"

clean:
	rm -rf bin python/sluice/libsluice.so python/sluice/libsluice.h
