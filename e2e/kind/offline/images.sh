#!/usr/bin/env bash
# The images `make e2e-kind` needs when none can be pulled, built on this machine from Debian's
# packages and the Go modules (versions: versions.sh):
#
#   e2e/kind/offline/images.sh node      # the kind node image; prints its name
#   e2e/kind/offline/images.sh runtime   # the runtime base for images/Dockerfile; prints its name
#   e2e/kind/offline/images.sh registry  # distribution's registry, which the cluster pulls our
#                                        # images from (built here online too); prints its name
#   e2e/kind/offline/images.sh kube-router  # kube-router's firewall, the NetworkPolicy
#                                           # enforcement kindnetd would give; prints its name
#
# Each is built once and kept in the engine's image store (its tag names its versions). The
# node image is assembled the way `kind build node-image` assembles one, which itself cannot run
# here (it pulls its base and the control plane's images): node.Dockerfile on a Debian base from
# debootstrap, then kubeadm, kubelet and kubectl copied in and the control plane's images
# imported into the node's containerd. Needs a running engine (engine.sh), root and debootstrap.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$here/versions.sh"
# shellcheck source-path=SCRIPTDIR
source "$here/host.sh"
state="${KIND_STATE_DIR:-$root/target/kind}"
docker="${DOCKER:-docker}"
export DOCKER_BUILDKIT=0

log() { echo "images: $*" >&2; }
have_image() { "$docker" image inspect "$1" >/dev/null 2>&1; }
# drop_other_tags IMAGE: removes the images of IMAGE's repository with another tag (made from
# other inputs, see versions.sh), so that the engine's store keeps what a build now would make.
drop_other_tags() {
  local repository="${1%:*}" other
  "$docker" image ls --format '{{.Repository}}:{{.Tag}}' "$repository" | while read -r other; do
    if [[ "$other" != "$1" && "$other" != "$1-base" ]]; then
      log "removing $other (made from other inputs)"
      "$docker" image rm "$other" >/dev/null || true
    fi
  done
}

# debian_image: Debian minbase from debootstrap, imported as an image.
debian_image() {
  have_image "$DEBIAN_IMAGE" && return 0
  command -v debootstrap >/dev/null || { log "debootstrap is required (apt-get install debootstrap)"; exit 1; }
  local rootfs="$state/rootfs-$DEBIAN_SUITE"
  if [[ ! -f "$rootfs/.complete" ]]; then
    log "debootstrap $DEBIAN_SUITE (minbase) from $DEBIAN_MIRROR"
    rm -rf "$rootfs"
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$state/debootstrap.log" 2>&1 \
      || { tail -n 20 "$state/debootstrap.log" >&2; exit 1; }
    touch "$rootfs/.complete"
  fi
  log "importing $DEBIAN_IMAGE"
  tar -C "$rootfs" --exclude=./.complete -c . | "$docker" import - "$DEBIAN_IMAGE" >/dev/null
}

runtime_image() {
  if ! have_image "$RUNTIME_BASE_IMAGE"; then
    debian_image
    log "building $RUNTIME_BASE_IMAGE"
    "$docker" build -q -f "$here/runtime-base.Dockerfile" --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
      -t "$RUNTIME_BASE_IMAGE" "$here" >/dev/null
    drop_other_tags "$RUNTIME_BASE_IMAGE"
  fi
  echo "$RUNTIME_BASE_IMAGE"
}

# binary_image NAME BINARY ENTRYPOINT: an image holding one static binary, nothing else.
binary_image() {
  local dir="$state/image-$1"
  rm -rf "$dir" && mkdir -p "$dir/usr/local/bin" "$dir/tmp"
  chmod 1777 "$dir/tmp"
  install -m 0755 "$2" "$dir/usr/local/bin/"
  tar -C "$dir" -c . | "$docker" import \
    --change 'ENV PATH=/usr/local/bin' --change "ENTRYPOINT [\"$3\"]" - "$1" >/dev/null
}

node_image() {
  if have_image "$NODE_IMAGE"; then
    echo "$NODE_IMAGE"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || { log "building the node image needs root (debootstrap)"; exit 1; }
  mkdir -p "$state"
  local kube go_bin kind_mod pause_src pause_tag
  kube="$("$root/tools/controlplane/build.sh" --node)"
  go_bin="$("$root/tools/kind/build.sh")"
  kind_mod="$(cd "$root/tools/kind" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)"
  pause_src="$(cd "$root/tools/controlplane" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .Dir)/build/pause"
  pause_tag="$(sed -n 's/^TAG ?= *//p' "$pause_src/Makefile")"
  debian_image

  log "building the node's base ($NODE_IMAGE-base)"
  local context="$state/node-context"
  rm -rf "$context" && mkdir -p "$context"
  cp -rL "$kind_mod/images/base/files" "$context/files" && chmod -R u+w "$context"
  cp "$here/runc-without-sys-resource" "$here/cni.conflist" "$context/"
  local runc=/usr/sbin/runc
  if lacks_sys_resource; then
    log "this machine lacks CAP_SYS_RESOURCE: the node's containerd runs runc-without-sys-resource"
    runc=/usr/local/sbin/runc-without-sys-resource
  fi
  "$docker" build -q -f "$here/node.Dockerfile" --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
    --build-arg "PAUSE_IMAGE=registry.k8s.io/pause:$pause_tag" --build-arg "RUNC_BINARY=$runc" \
    -t "$NODE_IMAGE-base" "$context" >/dev/null

  log "building the control plane's images"
  local images=()
  for component in kube-apiserver kube-controller-manager kube-scheduler; do
    binary_image "registry.k8s.io/$component:$K8S_VERSION" "$kube/$component" "/usr/local/bin/$component"
    images+=("registry.k8s.io/$component:$K8S_VERSION")
  done
  binary_image "registry.k8s.io/etcd:$ETCD_VERSION" "$kube/etcd" /usr/local/bin/etcd
  binary_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$go_bin/coredns" /usr/local/bin/coredns
  gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-initializer-e2e" -o "$state/pause" "$pause_src/linux/pause.c"
  binary_image "registry.k8s.io/pause:$pause_tag" "$state/pause" /usr/local/bin/pause
  images+=("registry.k8s.io/etcd:$ETCD_VERSION" "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "registry.k8s.io/pause:$pause_tag")
  # kube-proxy programs the node's packet filter: its image needs iptables and conntrack.
  local proxy="$state/image-kube-proxy"
  rm -rf "$proxy" && mkdir -p "$proxy" && install -m 0755 "$kube/kube-proxy" "$proxy/"
  printf '%s\n' "FROM $DEBIAN_IMAGE" \
    "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables conntrack nftables && rm -rf /var/lib/apt/lists/*" \
    "COPY kube-proxy /usr/local/bin/kube-proxy" > "$proxy/Dockerfile"
  "$docker" build -q -t "registry.k8s.io/kube-proxy:$K8S_VERSION" "$proxy" >/dev/null
  images+=("registry.k8s.io/kube-proxy:$K8S_VERSION")
  "$docker" save -o "$state/control-plane-images.tar" "${images[@]}"

  log "assembling $NODE_IMAGE"
  local builder
  builder="$("$docker" run -d --privileged --entrypoint sleep "$NODE_IMAGE-base" infinity)"
  # shellcheck disable=SC2064
  trap "'$docker' rm -f -v '$builder' >/dev/null 2>&1 || true" RETURN
  for binary in kubeadm kubelet kubectl; do
    "$docker" cp "$kube/$binary" "$builder:/usr/bin/$binary"
  done
  "$docker" cp "$go_bin/crictl" "$builder:/usr/local/bin/crictl"
  "$docker" cp "$state/control-plane-images.tar" "$builder:/kind/images.tar"
  "$docker" exec -i "$builder" bash -euc "
    echo '$K8S_VERSION' > /kind/version
    containerd >/tmp/containerd.log 2>&1 &
    for _ in \$(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
    ctr --namespace=k8s.io images import --no-unpack --all-platforms --digests /kind/images.tar >/dev/null
    ctr --namespace=k8s.io images list -q | grep -c registry.k8s.io >/dev/null
    kill %1 && wait || true
    rm -f /kind/images.tar /tmp/containerd.log"
  "$docker" commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    "$builder" "$NODE_IMAGE" >/dev/null
  rm -f "$state/control-plane-images.tar"
  drop_other_tags "$NODE_IMAGE"
  echo "$NODE_IMAGE"
}

# kube_router_image: kube-router (tools/kind/build.sh) with the iptables and ipset it drives, on
# Debian: the NetworkPolicy enforcement of a cluster on network.sh's bridges
# (network-policy.yaml runs it), as kindnetd enforces them on an online one.
kube_router_image() {
  if ! have_image "$KUBE_ROUTER_IMAGE"; then
    debian_image
    local go_bin context="$state/image-kube-router"
    go_bin="$("$root/tools/kind/build.sh")"
    rm -rf "$context" && mkdir -p "$context" && install -m 0755 "$go_bin/kube-router" "$context/"
    printf '%s\n' "FROM $DEBIAN_IMAGE" \
      "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables ipset && rm -rf /var/lib/apt/lists/*" \
      "COPY kube-router /usr/local/bin/kube-router" \
      'ENTRYPOINT ["/usr/local/bin/kube-router"]' > "$context/Dockerfile"
    log "building $KUBE_ROUTER_IMAGE"
    "$docker" build -q -t "$KUBE_ROUTER_IMAGE" "$context" >/dev/null
    drop_other_tags "$KUBE_ROUTER_IMAGE"
  fi
  echo "$KUBE_ROUTER_IMAGE"
}

# registry_image: distribution's registry (tools/release/build.sh) alone in an image, the
# registry the kind cluster pulls our images from.
registry_image() {
  local tools image
  tools="$("$root/tools/release/build.sh")"
  image="initializer-e2e/registry:$(basename "$tools")"
  if ! have_image "$image"; then
    log "building $image"
    binary_image "$image" "$tools/registry" /usr/local/bin/registry
    drop_other_tags "$image"
  fi
  echo "$image"
}

case "${1:-}" in
  node) node_image ;;
  runtime) runtime_image ;;
  registry) registry_image ;;
  kube-router) kube_router_image ;;
  *) echo "usage: $0 node|runtime|registry|kube-router" >&2; exit 2 ;;
esac
