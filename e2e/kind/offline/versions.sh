# shellcheck shell=bash disable=SC2034
# Every version the offline kind path uses, in one place (sourced, not run). The Go-built pieces
# are pinned by their go.mod files and read from there; the rest is pinned here.
#
#   Kubernetes (kubeadm, kubelet, kubectl, the control plane's images): tools/controlplane/go.mod
#   kind, crictl and CoreDNS: tools/kind/go.mod
#   kube-router (the NetworkPolicy enforcement, network-policy.yaml): tools/kind/kube-router/go.mod
#   pause: the TAG of build/pause/Makefile in that Kubernetes module
_versions_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

# Debian release of every local base image (the node, the runtime image, kube-proxy's image).
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# _go_mod_version MODULE GO_MOD: the version GO_MOD requires, in a require block or on one line.
_go_mod_version() { sed -n "s#^\(\t\|require \)$1 \(v[^ ]*\).*#\2#p" "$2" | head -n1; }
K8S_VERSION="$(_go_mod_version k8s.io/kubernetes "$_versions_root/tools/controlplane/go.mod")"
ETCD_VERSION="$(_go_mod_version go.etcd.io/etcd/server/v3 "$_versions_root/tools/controlplane/go.mod")"
KIND_VERSION="$(_go_mod_version sigs.k8s.io/kind "$_versions_root/tools/kind/go.mod")"
COREDNS_VERSION="$(_go_mod_version github.com/coredns/coredns "$_versions_root/tools/kind/go.mod")"
KUBE_ROUTER_VERSION="$(_go_mod_version github.com/cloudnativelabs/kube-router/v2 "$_versions_root/tools/kind/kube-router/go.mod")"

# _inputs_digest FILE...: a short digest of the files an image is made from, for its tag.
_inputs_digest() { (cd "$_versions_root" && cat "$@") | sha256sum | cut -c1-12; }

# The node image `make e2e-kind` builds when kindest/node cannot be pulled; its tag says what it
# holds and ends with a digest of the files it is made from, so a change to any of them (or to a
# version) builds a new one, and an image kept in the engine's store is reused only when a build
# now would make the same.
NODE_IMAGE="initializer-e2e/kind-node:${K8S_VERSION}-kind${KIND_VERSION#v}-$(_inputs_digest \
  e2e/kind/offline/{images.sh,versions.sh,node.Dockerfile,cni.conflist,runc-without-sys-resource} \
  tools/controlplane/{go.mod,go.sum,build.sh} tools/kind/{go.mod,go.sum,build.sh,coredns/main.go})"
# Local bases: Debian minbase, and a distroless-like runtime (glibc, libgcc, CA certificates,
# uid 65532, no shell) for images/Dockerfile's runtime stage.
DEBIAN_IMAGE="initializer-e2e/debian:${DEBIAN_SUITE}"
# kube-router's firewall on Debian's iptables and ipset, for network-policy.yaml.
KUBE_ROUTER_IMAGE="initializer-e2e/kube-router:${KUBE_ROUTER_VERSION}-$(_inputs_digest \
  e2e/kind/offline/images.sh tools/kind/build.sh tools/kind/kube-router/{go.mod,go.sum})"
RUNTIME_BASE_IMAGE="initializer-e2e/runtime-base:${DEBIAN_SUITE}-$(_inputs_digest e2e/kind/offline/runtime-base.Dockerfile)"
