# strata: `make demo` runs the whole pipeline on the demo image;
# `make test` installs what the tests need and runs them all.
GO       ?= go
BIN      := bin/strata
PKGS     := ./...

PREFIX   ?= /usr/local
DESTDIR  ?=

.PHONY: all build deps test test-debian test-boot unit lint demo demo-fleet bench fuzz clean man install

all: build

# The revision strata version reports when Go's own VCS stamping is off
# (GOFLAGS=-buildvcs=false) or unavailable.
REVISION ?= $(shell git describe --always --dirty --abbrev=12 2>/dev/null)

# Static (no cgo): no dynamic loader or libc pages in every agent's
# resident set (1.6 MiB less, docs/benchmarks.md), nothing for a libc
# update to restart strata for, and a binary an initramfs runs as is.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.stampedRevision=$(REVISION)" -o $(BIN) ./cmd/strata

deps:
	./scripts/deps.sh

# Man pages, one per command, generated from the command tree into
# docs/man (committed; a test checks they match the tree).
man: build
	rm -rf docs/man
	$(BIN) gen-man docs/man

# make install PREFIX=/usr/local [DESTDIR=...]: the binary, the man pages
# and bash, zsh and fish completions.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/strata
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 docs/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/strata
	$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_strata
	$(BIN) completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/strata.fish

# Every test, the Debian node image included (tag debian: it builds
# images/debian-node twice and compares), then the boot test (below). Needs
# root; the first run on a machine needs network and a few minutes
# (debootstrap, apt-get), later runs reuse the cache (/var/cache/strata-test;
# $$STRATA_TEST_CACHE for the Go test, $$STRATA_CACHE for the boot test) and
# take about two.
test: deps lint build
	$(GO) test -count=1 -tags debian -timeout 60m $(PKGS)
	./scripts/boot-test.sh $(BIN)

# The core's tests in seconds: -short, no network, every external tool
# (squashfs, mount, systemd, ssh, qemu, ...) replaced by one that fails.
# Images are built in the tar form (internal/imagefile), nodes are
# directory nodes; tests needing a tool, a kernel mount or systemd skip
# and `make test` runs them. No root needed: another user's run goes into
# a user namespace of its own, where tests needing the real root skip.
unit:
	GO=$(GO) ./scripts/unit.sh

# Only the Debian image test, verbose.
test-debian: deps
	$(GO) test -count=1 -tags debian -run Debian -timeout 60m -v ./builder

# Boot test: build images/debian-bootable (and two variants), provision
# two disks from it and boot them under qemu-system-x86_64 + OVMF
# (software emulation), checking over the serial console and SSH: a failed
# trial of an upgrade falling back, the layers stacked at boot and in
# effect, multi-user.target, a passing `strata verify-sequence --files`,
# the fleet view, a live upgrade to a new image, compaction, a rollout,
# dm-verity refusing changed blocks, and a disk signed for Secure Boot
# under OVMF's Secure Boot firmware (scripts/boot-test.sh). Needs root.
test-boot: build
	./scripts/boot-test.sh $(BIN)

lint:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags 'debian demofleet' $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags 'debian demofleet' $(PKGS)

demo: deps build
	./scripts/demo.sh $(BIN)

# A fleet on one machine (issue 22): three namespaced systemd nodes with
# sshd, nginx and agents, walked through central config, validation, a
# rollout, a node down, a local edit, a hold, a cluster restart and the
# status page (scripts/demo-fleet.sh). Needs root.
demo-fleet: deps build
	GO=$(GO) ./scripts/demo-fleet.sh

bench: deps build
	./scripts/bench.sh $(BIN)

FUZZTIME ?= 30s
fuzz:
	$(GO) test ./overlay -run '^$$' -fuzz '^FuzzReadArchive$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x
	$(GO) test ./overlay -run '^$$' -fuzz '^FuzzDecodeOverlayManifest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./manifests -run '^$$' -fuzz '^FuzzDecodeImageManifest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./manifests -run '^$$' -fuzz '^FuzzDecodeOverlay$$' -fuzztime $(FUZZTIME)
	$(GO) test ./manifests -run '^$$' -fuzz '^FuzzDecodeIndex$$' -fuzztime $(FUZZTIME)
	$(GO) test ./builder -run '^$$' -fuzz '^FuzzParseRecipe$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/catalog -run '^$$' -fuzz '^FuzzParseUnit$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/compress -run '^$$' -fuzz '^FuzzXzReader$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/repo -run '^$$' -fuzz '^FuzzOpenBundle$$' -fuzztime $(FUZZTIME)
	$(GO) test ./agent -run '^$$' -fuzz '^FuzzLoadConfig$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin demo-out
