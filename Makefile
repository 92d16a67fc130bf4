# strata: `make demo` runs the whole pipeline on the demo image;
# `make test` installs what the tests need and runs them all.
GO       ?= go
BIN      := bin/strata
PKGS     := ./...

.PHONY: all build deps test test-debian unit lint demo bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/strata

deps:
	./scripts/deps.sh

# Every test, the Debian node image included (tag debian): it builds
# images/debian-node twice and compares. Needs root; its first run on a
# machine needs network and about a minute (debootstrap, apt-get), later
# runs reuse the cache ($$STRATA_TEST_CACHE, default /var/cache/strata-test).
test: deps lint
	$(GO) test -count=1 -tags debian -timeout 60m $(PKGS)

# Only the Debian image test, verbose.
test-debian: deps
	$(GO) test -count=1 -tags debian -run Debian -timeout 60m -v ./builder

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags debian $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags debian $(PKGS)

demo: deps build
	./scripts/demo.sh $(BIN)

bench: deps build
	./scripts/bench.sh $(BIN)

FUZZTIME ?= 30s
fuzz:
	$(GO) test ./overlay -run '^$$' -fuzz '^FuzzReadArchive$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x
	$(GO) test ./overlay -run '^$$' -fuzz '^FuzzDecodeOverlayManifest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./manifests -run '^$$' -fuzz '^FuzzDecodeImageManifest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./manifests -run '^$$' -fuzz '^FuzzDecodeOverlay$$' -fuzztime $(FUZZTIME)
	$(GO) test ./builder -run '^$$' -fuzz '^FuzzParseRecipe$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/catalog -run '^$$' -fuzz '^FuzzParseUnit$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin demo-out
