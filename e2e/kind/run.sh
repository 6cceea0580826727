#!/usr/bin/env bash
# make e2e-kind: the end-to-end suite on a kind cluster, from nothing to teardown.
#
#   1. create the cluster from e2e/kind/kind-config.yaml (its own kubeconfig, not yours)
#   2. build every image with `make docker-build` and load each into the cluster
#   3. build the binaries (the installer and the test binary run on this machine)
#   4. install the operator from the bundle (`initializer-operator install --bundle
#      bundles/initializer-operator`), then run the same test binary as `make e2e` with
#      E2E_CLUSTER=kind: it applies the same install (idempotent, the code path the sandbox
#      uses) and runs every scenario
#   5. delete the cluster (always, on success, failure or Ctrl-C; E2E_KEEP_CLUSTER=1 keeps it)
#
# Needs docker (with a running engine), kind and kubectl. Pods are frozen and killed by
# signalling their processes on the kind node (`docker exec <node> kill -STOP <pid>`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cluster="${KIND_CLUSTER_NAME:-initializer-e2e}"
keep="${E2E_KEEP_CLUSTER:-0}"
cargo="${CARGO:-cargo}"
kubeconfig="$(mktemp -t initializer-e2e-kubeconfig.XXXXXX)"

# The binaries that ship as images (see docs/contracts.md and initializer_crds::images).
binaries=(
  initializer-operator
  preset-initializer
  sidecar-initializer
  test-certs-initializer
  proxy-initializer
  secret-guard-initializer
)
# Third-party images the scenarios create pods from.
extra_images=(nginx:1.8.1 busybox:1.36)

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "e2e-kind: '$1' is required: $2" >&2
    exit 1
  fi
}

log() {
  echo "e2e-kind: $*" >&2
}

teardown() {
  local status=$?
  if [[ "$keep" == "1" ]]; then
    log "keeping cluster '$cluster' (E2E_KEEP_CLUSTER=1); kubeconfig: $kubeconfig"
  else
    log "deleting cluster '$cluster'"
    kind delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1 || true
    rm -f "$kubeconfig"
  fi
  exit "$status"
}

need docker "install Docker and start its engine"
need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need kubectl "install kubectl"
need "$cargo" "install Rust with rustup"
if ! docker info >/dev/null 2>&1; then
  echo "e2e-kind: the Docker engine is not running (docker info failed)" >&2
  exit 1
fi

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
if [[ -z "$version" ]]; then
  echo "e2e-kind: failed to read the workspace version from $root/Cargo.toml" >&2
  exit 1
fi

trap teardown EXIT
trap 'exit 130' INT TERM

log "creating cluster '$cluster'"
kind create cluster --name "$cluster" --config "$here/kind-config.yaml" \
  --kubeconfig "$kubeconfig" --wait 180s
export KUBECONFIG="$kubeconfig"
kubectl cluster-info

log "building images (make docker-build)"
make -C "$root" docker-build

for binary in "${binaries[@]}"; do
  image="ghcr.io/initializer-dev/$binary:$version"
  log "loading $image"
  kind load docker-image --name "$cluster" "$image"
done
for image in "${extra_images[@]}"; do
  # Scenarios only inspect these pods' specs; a pull failure makes them wait, not fail.
  if docker pull --quiet "$image" >/dev/null 2>&1; then
    kind load docker-image --name "$cluster" "$image"
  else
    log "could not pull $image; pods using it will wait for their image"
  fi
done

log "building binaries"
(cd "$root" && "$cargo" build --workspace --bins)

log "installing the operator from the bundle"
(cd "$root" && "$cargo" run -q -p initializer-operator -- install --bundle bundles/initializer-operator)

# The suite runs the same install again (it is idempotent), exactly as it does on the sandbox.
log "running the suite against kind-$cluster"
(cd "$root" && E2E_CLUSTER=kind E2E_KUBECONTEXT="kind-$cluster" \
  "$cargo" test -p initializer-e2e --test e2e -- "$@")
