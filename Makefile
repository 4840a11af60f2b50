# Sluice. `make demo` runs the main job; `make test` runs everything CI runs.
GO       ?= go
FUZZTIME ?= 10s
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

# Fuzz targets as package:Target; each runs for FUZZTIME in `make test`.
FUZZ_TARGETS = ./fabric/tcp:FuzzDecodeFrame ./fabric/tcp:FuzzServe ./fabric/internal/handshake:FuzzHandshake

.PHONY: all build test unit fuzz lint demo bench clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/sluice ./cmd/sluice

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -timeout 20m ./...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	done

test: lint build unit fuzz

demo: build
	./bin/sluice bench fabric --duration 2s
	./bin/sluice bench fabric --size 4KiB --duration 1s

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 3 ./fabric/...

clean:
	rm -rf bin
