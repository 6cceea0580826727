#!/usr/bin/env bash
# make e2e-kind: the end-to-end suite on a kind cluster, from nothing to teardown.
#
#   1. a container engine: the one that answers `docker info`, else dockerd started here
#      (e2e/kind/offline/engine.sh; root) and stopped at the end
#   2. the node image: e2e/kind/kind-config.yaml's kindest/node, pulled as usual; when it cannot be
#      pulled (no registry), one assembled on this machine (e2e/kind/offline/images.sh) and the
#      cluster configured for it (e2e/kind/offline/kind-config.yaml)
#   3. create the cluster (its own kubeconfig, not yours); offline, give each node its pod
#      network (offline/network.sh stands in for kindnetd, which ships only as an image) and
#      enforce NetworkPolicies as kindnetd does (kube-router's firewall,
#      offline/network-policy.yaml)
#   4. a release, as users pull one: distribution's registry as a container on kind's network
#      (each node's containerd pulls from it under its own name and as ghcr.io's mirror), then
#      `make release` to it (tools/release/release.sh: the binaries built here, in release or as
#      E2E_KIND_PROFILE=debug says, our images, bundle and catalog images and chart pushed by
#      digest, signed, with SBOMs) and tools/release/verify.sh before anything is installed;
#      before it (when no scenario is named), the previous release built from its own tree
#      (tools/release/previous.sh), which this release's catalog carries too. One publisher key
#      signs both. Only OLM's image and the scenarios' third-party images are loaded with
#      `kind load`
#   5. install the operator from the release's bundle (every image by digest), and with its OCI
#      chart through Helm; then run the suite (which installs the bundle again) with
#      E2E_CLUSTER=kind and E2E_RELEASE naming the release
#   6. when no scenario is named: the upgrades from the previous release to this one under
#      load, through `install --bundle` and `helm upgrade` of the OCI chart (e2e/tests/olm.rs,
#      release_upgrades_on_kind_lose_no_create); then OLM on kind: an image of the OLM binaries
#      tools/olm/build.sh builds, loaded in step 4; the bundle's install removed, OLM's
#      operators deployed as pods, the operator installed by Subscription from the previous
#      release's catalog image and upgraded by rolling the CatalogSource to this release's
#      (olm_on_kind_installs_the_operator_and_the_example_registers)
#   7. delete the cluster and the registry, and stop what step 1 started (always: success,
#      failure or Ctrl-C; E2E_KEEP_CLUSTER=1 keeps the cluster, the registry and the engine)
#
# Needs kubectl and cargo; kind is built from its Go module (tools/kind) when not on PATH.
# Pods are frozen and killed by signalling their processes on the kind node
# (`docker exec <node> kill -STOP <pid>`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# The cluster's name is ours (E2E_KIND_CLUSTER), never kind's own KIND_CLUSTER_NAME: the recipe
# deletes its cluster at the end, and a name exported for one's own clusters must not lead it to
# someone else's.
cluster="${E2E_KIND_CLUSTER:-initializer-e2e}"
keep="${E2E_KEEP_CLUSTER:-0}"
cargo="${CARGO:-cargo}"
# What every build and test here passes, as the Makefile's WORKSPACE: one package set and one
# feature set, so the workspace's crates compile once (a `-p` build resolves other features and
# compiles them again). `cargo run` takes no --workspace: in this virtual workspace it selects
# every package anyway, so the features alone name the same build.
workspace=(--workspace --features initializer-crds/generate)
operator_cli=("$cargo" run -q --features initializer-crds/generate --bin initializer-operator --)
# The profile of the binaries in the images built offline: release, what images/Dockerfile
# builds and users run, or debug, the workspace's debug build that the suite needs anyway (CI
# sets it: the claims kind adds are the kubelet's, the runtime's and the network's, not the
# optimiser's, and a release build of every dependency is the longest build of a cold run).
profile="${E2E_KIND_PROFILE:-release}"
if [[ "$profile" != release && "$profile" != debug ]]; then
  echo "e2e-kind: E2E_KIND_PROFILE is release or debug, not '$profile'" >&2
  exit 2
fi
docker="${DOCKER:-docker}"
export DOCKER="$docker" E2E_DOCKER="$docker"
# The recipe's state (kubeconfig, cluster mark, build contexts; the engine's log): the offline
# scripts read the same variable.
state="${KIND_STATE_DIR:-$root/target/kind}"
export KIND_STATE_DIR="$state"
mkdir -p "$state"
kubeconfig="$state/kubeconfig"

# Third-party images the scenarios create pods from (loaded when they can be pulled).
extra_images=(nginx:1.8.1 busybox:1.36)
# The image of the pods that must run a shell with bash (E2E_SHELL_IMAGE, the suite's default
# unless set): Debian, pulled online; offline the local Debian base (step 2).
export E2E_SHELL_IMAGE="${E2E_SHELL_IMAGE:-debian:bookworm-slim}"

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "e2e-kind: '$1' is required: $2" >&2
    exit 1
  fi
}

log() {
  echo "e2e-kind: $*" >&2
}

# stage NAME COMMAND...: a step, with when it starts and how long it took; the table of them
# at the end (CI's own table when run from CI, which set STAGE_LOG).
# shellcheck source=tools/lib/stage.sh
source "$root/tools/lib/stage.sh"
own_stage_log=""
if [[ -z "${STAGE_LOG:-}" ]]; then
  own_stage_log="$(mktemp -t e2e-kind-stages.XXXXXX)"
  export STAGE_LOG="$own_stage_log"
fi

engine_started=0
kind_bin=""
# The registry's container (step 4), removed at the end with the cluster, and where it keeps
# what is pushed to it: a directory here, so that what an earlier run packaged can be put back
# into it (the previous release, below).
registry_container=""
registry_storage="$state/registry-storage-$cluster"
# The background apply of the first Initializer (step 5), stopped if the run ends before it.
beside=""
# Whether this run may delete the cluster: set once the recipe knows the cluster of that name is
# its own (none existed, or one an earlier run made and left, by its mark in $state).
cluster_ours=0
cluster_mark="$state/cluster-$cluster.made-here"
teardown() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$beside" ]]; then
    kill "$beside" 2>/dev/null || true
  fi
  if [[ "$keep" == "1" ]]; then
    log "keeping cluster '$cluster' (E2E_KEEP_CLUSTER=1); export KUBECONFIG=$kubeconfig"
  else
    if [[ -n "$registry_container" ]]; then
      "$docker" rm -f "$registry_container" >/dev/null 2>&1 || true
      rm -rf "$registry_storage"
    fi
    if [[ "$cluster_ours" == "1" ]]; then
      log "deleting cluster '$cluster'"
      if "$kind_bin" delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1; then
        rm -f "$cluster_mark"
      else
        log "deleting cluster '$cluster' failed; its mark $cluster_mark stays, so the next run deletes it"
      fi
    fi
    rm -f "$kubeconfig"
    if [[ "$engine_started" == "1" ]]; then
      "$here/offline/engine.sh" stop || true
    fi
  fi
  stage_failed "$status"
  if [[ -n "$own_stage_log" ]]; then
    log "stages:"
    stage_summary >&2
    rm -f "$own_stage_log"
  fi
  exit "$status"
}

need kubectl "install kubectl"
need "$cargo" "install Rust with rustup"
trap teardown EXIT
trap 'exit 130' INT TERM

# 1. The engine.
if ! "$docker" info >/dev/null 2>&1; then
  stage "starting a container engine" "$here/offline/engine.sh" start
  engine_started=1
fi

# The setup below (builds, the cluster, the images saved and unpacked on every node) loads the
# machine, so it holds a shared turn of the suites' lock (e2e/src/sharing.rs, the same flock
# protocol): a scenario of another suite that must have the machine to itself waits until it is
# done. Released before the suite, whose scenarios take their own turns.
# shellcheck source=tools/lib/turn.sh
source "$root/tools/lib/turn.sh"
take_shared_turn "$root" e2e-kind

# kind: the one on PATH, else built from the module pinned in tools/kind.
if command -v kind >/dev/null 2>&1; then
  kind_bin="$(command -v kind)"
else
  stage "building kind from its Go module" "$root/tools/kind/build.sh" >/dev/null
  kind_bin="$root/target/kind/bin/kind"
fi

# A cluster of that name that no run of this recipe made is someone else's: refuse, touch nothing.
if "$kind_bin" get clusters 2>/dev/null | grep -qxF "$cluster"; then
  if [[ ! -f "$cluster_mark" ]]; then
    echo "e2e-kind: a kind cluster named '$cluster' exists and this recipe did not make it; it is left alone. Delete it yourself (kind delete cluster --name $cluster) or name this run's cluster with E2E_KIND_CLUSTER" >&2
    exit 1
  fi
  log "cluster '$cluster' was left by an earlier run: it goes"
fi
cluster_ours=1

# 2. The node image.
config="$here/kind-config.yaml"
node_image="$(sed -n 's/^ *image: *//p' "$config" | head -n1)"
offline=0
if ! "$docker" image inspect "$node_image" >/dev/null 2>&1 \
    && ! "$docker" pull --quiet "$node_image" >/dev/null 2>&1; then
  log "$node_image cannot be pulled: building the images this cluster needs on this machine"
  offline=1
  stage "building the node image" "$here/offline/images.sh" node >/dev/null
  # shellcheck source-path=SCRIPTDIR
  source "$here/offline/versions.sh"
  E2E_SHELL_IMAGE="$DEBIAN_IMAGE"
  config="$state/kind-config.yaml"
  sed -e "s#\${NODE_IMAGE}#$NODE_IMAGE#" -e "s#\${ETCD_VERSION}#$ETCD_VERSION#" \
    -e "s#\${COREDNS_VERSION}#$COREDNS_VERSION#" "$here/offline/kind-config.yaml" > "$config"
fi

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
if [[ -z "$version" ]]; then
  echo "e2e-kind: failed to read the workspace version from $root/Cargo.toml" >&2
  exit 1
fi

# 3. The cluster.
"$kind_bin" delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1 || true
touch "$cluster_mark"
# ANCHOR: cluster
stage "creating cluster '$cluster'" "$kind_bin" create cluster --name "$cluster" \
  --config "$config" --kubeconfig "$kubeconfig" --retain
export KUBECONFIG="$kubeconfig"
# ANCHOR_END: cluster
# Offline, the network enforces NetworkPolicies as kindnetd does online: kube-router's firewall
# beside network.sh's bridges (offline/network-policy.yaml).
enforce_network_policies() {
  local image
  image="$("$here/offline/images.sh" kube-router)"
  "$kind_bin" load docker-image --name "$cluster" "$image"
  sed "s#\${KUBE_ROUTER_IMAGE}#$image#" "$here/offline/network-policy.yaml" | kubectl apply -f -
  kubectl -n kube-system rollout status daemonset/kube-router --timeout=180s
}
if [[ "$offline" == "1" ]]; then
  stage "giving each node its pod network" "$here/offline/network.sh" "$cluster"
fi
# ANCHOR: ready
stage "waiting for every node to be Ready" kubectl wait --for=condition=Ready node --all --timeout=180s
# ANCHOR_END: ready
if [[ "$offline" == "1" ]]; then
  stage "enforcing NetworkPolicies (kube-router)" enforce_network_policies
fi
kubectl cluster-info

# 4. The images: a release, as users pull one. distribution's registry runs as a container on
# kind's network; tools/release/release.sh builds our six images, the bundle and catalog
# images and the chart, pushes them to it by digest, signs them and attaches their SBOMs; and
# tools/release/verify.sh checks it all before anything is installed. Each node's containerd
# pulls from that registry under its own name (what the release's bundle and chart name, by
# digest) and as ghcr.io's mirror (what the scenarios' Initializers name, by tag): nothing of
# ours is loaded into the nodes. The binaries are built here, in release or as
# E2E_KIND_PROFILE=debug says; the images run on images/Dockerfile's base where it can be
# pulled, else on the same Debian packages built here.
# free_port [PORT]: PORT when the loopback interface has it free, else a port it has free.
free_port() {
  python3 - "${1:-0}" <<'PY'
import socket, sys
def bind(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return s.getsockname()[1]
try:
    print(bind(int(sys.argv[1])))
except OSError:
    print(bind(0))
PY
}
# The previous release as an earlier run packaged it. A release is built once and pulled ever
# after, and building it again cost every run minutes although nothing it is made of had
# changed. What the registry stored of it, its release directory, the publisher key that signed
# it and the registry port its references name are kept beside its tree (target/previous, which
# CI keeps across clones), under a digest of everything that made them: its commit, the
# profile, rustc, the versions of the tools that built, signed and described it, and the
# runtime image built here that its images run on. A run that cannot have that port again
# builds the release anew.
previous_packaged=""
previous_reused=0
find_previous_packaged() {
  local inputs release_tools gomod helm olm runtime=""
  release_tools="$("$root/tools/release/build.sh")"
  gomod="$("$root/tools/release/build.sh" cyclonedx-gomod)"
  helm="$("$root/tools/helm/build.sh")"
  olm="$("$root/tools/olm/build.sh")"
  if [[ "$offline" == 1 ]]; then
    runtime="$("$docker" image inspect --format '{{.Id}}' "$("$here/offline/images.sh" runtime)")"
  fi
  inputs="$PREVIOUS_COMMIT $profile $(cd "$root" && rustc -vV) $runtime${RELEASE_TARGET:+ $RELEASE_TARGET}"
  inputs+=" ${release_tools#"$root/"} ${gomod#"$root/"} ${helm#"$root/"} ${olm#"$root/"}"
  previous_packaged="$root/target/previous/packaged-$(sha256sum <<<"$inputs" | cut -c1-16)"
}
# The port the packaged previous release names, or nothing when there is none.
previous_packaged_port() {
  if [[ -n "$previous_packaged" && -f "$previous_packaged/port" ]]; then
    cat "$previous_packaged/port"
  fi
}
# Keeps what previous_release made, the registry holding nothing else yet, for the next run.
package_previous() {
  local partial="$previous_packaged.partial"
  rm -rf "$root"/target/previous/packaged-* && mkdir -p "$partial"
  cp -a "$registry_storage" "$partial/registry"
  cp -a "$previous_dir" "$partial/release"
  cp -a "$state/publisher" "$partial/publisher"
  echo "${registry##*:}" >"$partial/port"
  mv "$partial" "$previous_packaged"
}
start_registry() {
  local image port packaged_port node host
  image="$("$here/offline/images.sh" registry)"
  registry_container="$cluster-registry"
  "$docker" rm -f "$registry_container" >/dev/null 2>&1 || true
  packaged_port="$(previous_packaged_port)"
  port="$(free_port "$packaged_port")"
  rm -rf "$registry_storage" && mkdir -p "$registry_storage"
  if [[ "$port" == "$packaged_port" ]]; then
    cp -a "$previous_packaged/registry/." "$registry_storage/"
    previous_reused=1
  fi
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: /var/lib/registry\nhttp:\n  addr: :5000\n' \
    >"$state/registry.yml"
  # ANCHOR: registry
  "$docker" run -d --name "$registry_container" --network kind -p "127.0.0.1:$port:5000" \
    --user "$(id -u):$(id -g)" -v "$registry_storage:/var/lib/registry" \
    -v "$state/registry.yml:/etc/distribution/config.yml:ro" "$image" serve /etc/distribution/config.yml >/dev/null
  # ANCHOR_END: registry
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/v2/" >/dev/null \
    || { "$docker" logs "$registry_container" >&2; log "the registry did not answer"; return 1; }
  registry="localhost:$port"
  # ANCHOR: mirror
  for node in $("$kind_bin" get nodes --name "$cluster"); do
    for host in "$registry" ghcr.io; do
      "$docker" exec "$node" sh -c "mkdir -p '/etc/containerd/certs.d/$host' && printf '%s\n' \
        '[host.\"http://$registry_container:5000\"]' '  capabilities = [\"pull\", \"resolve\"]' \
        > '/etc/containerd/certs.d/$host/hosts.toml'"
    done
  done
  # ANCHOR_END: mirror
  log "registry $registry (on the nodes: $registry_container:5000, also as ghcr.io's mirror)"
}
# One publisher key for both releases, as a project signs every release with its own.
publisher_key() {
  local cosign
  cosign="$("$root/tools/release/build.sh")/cosign"
  rm -rf "$state/publisher"
  if ((previous_reused)); then
    cp -a "$previous_packaged/publisher" "$state/publisher"
  else
    mkdir -p "$state/publisher"
    (cd "$state/publisher" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null 2>&1)
  fi
  export COSIGN_KEY="$state/publisher/cosign.key" COSIGN_PASSWORD=""
}
# The previous release (tools/release/previous names it), built from its own tree and pushed
# to the same registry: this release's catalog carries its bundle too, with the upgrade edge,
# and the upgrade scenarios (step 6) start from it.
# shellcheck source=tools/release/previous
source "$root/tools/release/previous"
previous_dir=""
previous_release() {
  local verify
  verify="$("$root/tools/release/previous.sh" --tree)/tools/release/verify.sh"
  previous_dir="$state/release-$PREVIOUS_VERSION"
  rm -rf "$previous_dir"
  # Checked for what that release promised, by its own tree's verify.sh (0.1.0's bundle and
  # catalog images carry no SBOM): a packaged one as much as one just built.
  if ((previous_reused)); then
    log "the previous release as packaged by an earlier run ($previous_packaged)"
    cp -a "$previous_packaged/release" "$previous_dir"
    "$verify" "$previous_dir" "$state/publisher/cosign.pub" && return 0
    # Built anew as by a first run: into an empty registry, signed with a new key.
    log "the packaged previous release does not verify: building it anew"
    rm -rf "$previous_dir" "$previous_packaged"
    previous_reused=0
    start_registry
    publisher_key
  fi
  REGISTRY="$registry" RELEASE_PROFILE="$profile" RELEASE_OUT="$previous_dir" \
    "$root/tools/release/previous.sh" >/dev/null
  "$verify" "$previous_dir" "$state/publisher/cosign.pub"
  package_previous
}
release() {
  # ANCHOR: release
  REGISTRY="$registry" RELEASE_PROFILE="$profile" RELEASE_OUT="$release_dir" \
    PREVIOUS_RELEASE="$previous_dir" "$root/tools/release/release.sh"
  "$root/tools/release/verify.sh" "$release_dir" "$state/publisher/cosign.pub"
  # ANCHOR_END: release
}
if (($# == 0)); then stage "the previous release's inputs" find_previous_packaged; fi
stage "starting the cluster's registry" start_registry
stage "the publisher's signing key" publisher_key
# The upgrade scenarios run unless the run was asked for some scenarios only.
if (($# == 0)); then
  stage "the previous release ($PREVIOUS_VERSION), from its own tree" previous_release
  export E2E_PREVIOUS_RELEASE="$previous_dir"
fi
# The recipe's release, in its state (never over a release of yours in target/release).
release_dir="$state/release-$version"
export E2E_RELEASE="$release_dir"
stage "the release: pushed, signed and verified" release
# OLM's image, for step 6, and the third-party images the scenarios create pods from: these
# are loaded into the nodes (`kind load`, one archive for all, the layers they share once).
olm_image=""
build_olm_image() {
  local tools context="$state/olm-context" args=()
  tools="$("$root/tools/olm/build.sh")"
  olm_image="initializer-e2e/olm:$(basename "$tools")"
  rm -rf "$context" && mkdir -p "$context"
  cp "$tools/olm" "$tools/catalog" "$tools/opm" "$tools/cpb" "$tools/busybox" "$context/"
  if [[ "$offline" == "1" ]]; then
    args+=(--build-arg "RUNTIME_IMAGE=$("$here/offline/images.sh" runtime)")
  fi
  if "$docker" buildx version >/dev/null 2>&1; then
    "$docker" buildx build --load -q -f "$here/olm.Dockerfile" "${args[@]}" -t "$olm_image" "$context" >/dev/null
  else
    DOCKER_BUILDKIT=1 "$docker" build -q -f "$here/olm.Dockerfile" "${args[@]}" -t "$olm_image" "$context" >/dev/null
  fi
}
load_images() {
  local images=() image
  if [[ -n "$olm_image" ]]; then images+=("$olm_image"); fi
  for image in "${extra_images[@]}" "$E2E_SHELL_IMAGE"; do
    # Scenarios only inspect the specs of the third-party images' pods: a pull failure makes
    # them wait, not fail. The shell image's pods run, and it is local offline.
    if "$docker" image inspect "$image" >/dev/null 2>&1 || "$docker" pull --quiet "$image" >/dev/null 2>&1; then
      images+=("$image")
    else
      log "could not pull $image; pods using it will wait for their image"
    fi
  done
  if ((${#images[@]})); then
    # ANCHOR: load
    "$kind_bin" load docker-image --name "$cluster" "${images[@]}"
    # ANCHOR_END: load
  fi
}
# OLM on kind runs unless the run was asked for some scenarios only (step 6).
if (($# == 0)); then
  stage "building OLM's image" build_olm_image
fi
stage "loading OLM's and the scenarios' third-party images" load_images

# 5. Install, then the suite (it applies the same install again: idempotent, the code path the
# sandbox uses).
cd "$root"
stage "building the binaries" "$cargo" build -q "${workspace[@]}" --bins
# The book's first Initializer, applied beside the install as a GitOps sync of both applies it:
# again every 200 ms until the API server serves Initializers. The install puts the guard in force
# before the CRD exists, so it must be deployed as created (generation 1), not held back.
apply_beside() {
  local tries=0 refused
  until refused="$(kubectl apply -f "$release_dir/examples/sidecar-initializer.yaml" 2>&1)"; do
    tries=$((tries + 1))
    if ((tries >= 1500)); then
      log "the first Initializer was refused $tries times beside the install, last: $refused"
      return 1
    fi
    sleep 0.2
  done
}
apply_beside &
beside=$!
# ANCHOR: install
stage "installing the operator from the release's bundle" \
  "${operator_cli[@]}" install --bundle "$release_dir"
# ANCHOR_END: install
first_initializer() {
  wait "$beside"
  beside=""
  # ANCHOR: first
  kubectl apply -f "$release_dir/examples/sidecar-initializer.yaml"
  kubectl wait initializer/sidecar --for=condition=Ready --timeout=120s
  kubectl get initializers        # PHASE Registered
  # ANCHOR_END: first
  local generation
  generation="$(kubectl get initializer sidecar -o jsonpath='{.metadata.generation}')"
  if [[ "$generation" != "1" ]]; then
    log "the Initializer applied beside the install is Ready at generation $generation, not 1"
    return 1
  fi
  kubectl delete initializer sidecar --wait --timeout=60s
}
stage "the first Initializer, applied beside the install" first_initializer
# The same release through its OCI chart, as a Helm user installs it: the bundle's install
# removed, the chart pulled from the registry by the digest the release lists, the operator's image
# checked to be the release's digest, the first Initializer registered, then everything removed
# as the uninstall page says for Helm; the suite installs the release's bundle again.
helm_from_the_release() {
  local helm chart operator image
  helm="$("$root/tools/helm/build.sh")"
  "${operator_cli[@]}" uninstall --delete-initializers >/dev/null
  kubectl wait --for=delete namespace/initializer-system --timeout=120s 2>/dev/null || true
  # ANCHOR: helm
  chart="$(grep -F '/charts/initializer-operator@' "$release_dir/images.txt")"
  "$helm" install initializer-operator "oci://$chart" \
    --plain-http -n initializer-system --create-namespace --wait --timeout 180s
  # ANCHOR_END: helm
  operator="$(grep -F '/initializer-dev/initializer-operator@' "$release_dir/images.txt")"
  image="$(kubectl -n initializer-system get deployment initializer-operator \
    -o jsonpath='{.spec.template.spec.containers[0].image}')"
  [[ "$image" == "$operator" ]] || { log "Helm deployed $image, not the release's $operator"; return 1; }
  kubectl apply -f "$release_dir/examples/sidecar-initializer.yaml"
  kubectl wait initializer/sidecar --for=condition=Ready --timeout=120s
  kubectl delete initializer sidecar --wait --timeout=60s
  "$helm" uninstall initializer-operator -n initializer-system --wait --timeout 120s
  kubectl delete crd initializers.initializer.dev --wait --timeout=60s
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy initializer-operator-guard \
    initializer-operator-bounds.initializer-system.initializer-operator --ignore-not-found
  kubectl delete namespace initializer-system --wait --timeout=120s
}
stage "the release's chart, installed with Helm from the registry" helm_from_the_release
release_turn
run_suite() {
  E2E_CLUSTER=kind E2E_KUBECONTEXT="kind-$cluster" "$cargo" test -q "${workspace[@]}" --test e2e -- "$@"
}
stage "running the suite against kind-$cluster" run_suite "$@"

# 6. The upgrades from the previous release and OLM on kind, unless the run was asked for some
# scenarios only.
run_upgrades() {
  "$cargo" test -q "${workspace[@]}" --test olm -- --ignored --exact \
    release_upgrades_on_kind_lose_no_create --nocapture
}
if (($# == 0)); then
  stage "upgrades from $PREVIOUS_VERSION: install --bundle, Helm" run_upgrades
fi
run_olm() {
  E2E_OLM_IMAGE="$olm_image" "$cargo" test -q "${workspace[@]}" --test olm -- --ignored --exact \
    olm_on_kind_installs_the_operator_and_the_example_registers --nocapture
}
if (($# == 0)); then
  stage "OLM on kind: install by Subscription, upgrade, removal" run_olm
fi
