# shellcheck shell=bash disable=SC2034
# Every version the offline kind path uses, in one place (sourced, not run). The Go-built pieces
# are pinned by their go.mod files and read from there; the rest is pinned here.
#
#   Kubernetes (kubeadm, kubelet, kubectl, the control plane's images): e2e/controlplane/go/go.mod
#   kind and CoreDNS: e2e/kind/go/go.mod
#   pause: the TAG of build/pause/Makefile in that Kubernetes module
_versions_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

# Debian release of every local base image (the node, the runtime image, kube-proxy's image).
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

_go_mod_version() { sed -n "s#^\t$1 \(v[^ ]*\).*#\1#p" "$2" | head -n1; }
K8S_VERSION="$(_go_mod_version k8s.io/kubernetes "$_versions_root/e2e/controlplane/go/go.mod")"
ETCD_VERSION="$(_go_mod_version go.etcd.io/etcd/server/v3 "$_versions_root/e2e/controlplane/go/go.mod")"
KIND_VERSION="$(_go_mod_version sigs.k8s.io/kind "$_versions_root/e2e/kind/go/go.mod")"
COREDNS_VERSION="$(_go_mod_version github.com/coredns/coredns "$_versions_root/e2e/kind/go/go.mod")"

# The node image `make e2e-kind` builds when kindest/node cannot be pulled; its tag says what it
# holds, so a version change builds a new one.
NODE_IMAGE="initializer-e2e/kind-node:${K8S_VERSION}-kind${KIND_VERSION#v}"
# Local bases: Debian minbase, and a distroless-like runtime (glibc, libgcc, CA certificates,
# uid 65532, no shell) for images/Dockerfile's runtime stage.
DEBIAN_IMAGE="initializer-e2e/debian:${DEBIAN_SUITE}"
RUNTIME_BASE_IMAGE="initializer-e2e/runtime-base:${DEBIAN_SUITE}"
