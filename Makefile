# strata: `make demo` runs the whole pipeline on the demo image;
# `make test` installs what the tests need and runs them all.
GO       ?= go
BIN      := bin/strata
PKGS     := ./...

.PHONY: all build deps test unit lint demo bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/strata

deps:
	./scripts/deps.sh

test: deps lint
	$(GO) test -count=1 $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

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
