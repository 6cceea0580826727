#!/usr/bin/env bash
# Builds the real control plane (etcd, kube-apiserver, kube-controller-manager) from the official
# Go modules into a cache keyed by version, and prints the directory holding the binaries.
#
#   tools/controlplane/build.sh                 # the pinned version (go.mod in this directory)
#   K8S_VERSION=1.34.6 tools/controlplane/build.sh   # any other release: one command away
#   tools/controlplane/build.sh --node          # also what a kind node runs: kubeadm, kubelet,
#                                                # kubectl, kube-scheduler, kube-proxy (e2e/kind)
#
# One module serves both sets, so the packages they share are compiled once. etcd is the pinned
# one for every Kubernetes version: its v3 API is what kube-apiserver speaks to, the releases
# this project runs on do not depend on its minor, and another version's etcd would be a whole
# second build for nothing the tests look at.
# Returns at once when the binaries of that version are already built. Go's module and build
# caches are reused, so a rebuild after a cache wipe of ours costs only the link.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
pinned="$(sed -n 's#^\tk8s.io/kubernetes v\([0-9.]*\).*#\1#p' "$here/go.mod")"
version="${K8S_VERSION:-$pinned}"
cache="${CONTROLPLANE_CACHE:-$here/../../target/controlplane}"
out="$cache/v$version"
tools=(etcd kube-apiserver kube-controller-manager)
packages=(go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
marker="$out/.complete"
if [[ "${1:-}" == "--node" ]]; then
  for tool in kubeadm kubelet kubectl kube-scheduler kube-proxy; do
    tools+=("$tool")
    packages+=("k8s.io/kubernetes/cmd/$tool")
  done
  marker="$out/.complete-node"
elif [[ -n "${1:-}" ]]; then
  echo "usage: $0 [--node]" >&2
  exit 2
fi

one_build_at_a_time "$cache" "v$version"
if [[ -f "$marker" ]]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build the control plane (Go >= 1.25)" >&2; exit 1; }

# The module to build from: ours for the pinned version; for another one, a module made from
# that release's own go.mod: our tool list, its etcd, and its staging modules (the list changes
# between releases) at the matching version. Go's module resolution does the rest.
src="$here"
if [[ "$version" != "$pinned" ]]; then
  src="$cache/src-v$version"
  mkdir -p "$src"
  staging="0.${version#1.}"
  mod="$(go mod download -json "k8s.io/kubernetes@v$version" 2>&1)" || {
    echo "the Go module proxy refused k8s.io/kubernetes@v$version:" >&2; echo "$mod" >&2; exit 1; }
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$mod")"
  etcd="$(sed -n 's#^\tgo.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$gomod")"
  {
    sed -n '1,/^)/p' "$here/go.mod"
    printf '\nrequire (\n\tgo.etcd.io/etcd/server/v3 %s // indirect\n\tk8s.io/kubernetes v%s // indirect\n)\n\nreplace (\n' \
      "${etcd:?no etcd in k8s.io/kubernetes@v$version}" "$version"
    sed -n "s#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v$staging#p" "$gomod"
    printf ')\n'
  } > "$src/go.mod"
  sed -i "s/^go [0-9.]*$/$(grep '^go ' "$gomod")/" "$src/go.mod"
  rm -f "$src/go.sum"
  (cd "$src" && go mod tidy) || { echo "go mod tidy failed for Kubernetes v$version (see above for the module)" >&2; exit 1; }
fi

# Every module must be downloadable; name the one the proxy refuses instead of failing mid-build.
if ! download="$(cd "$src" && go mod download -x all 2>&1)"; then
  echo "could not download the control plane's modules for v$version:" >&2
  grep -E 'reading|not found|refused|410|404|403|verifying' <<<"$download" | head -n 5 >&2 || tail -n 5 <<<"$download" >&2
  exit 1
fi

mkdir -p "$out"
minor="${version#1.}"; minor="${minor%%.*}"
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=v$version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
control_plane_tools=3
for i in "${!tools[@]}"; do
  # The control plane's three are kept when built already; a node build adds to them.
  if (( i < control_plane_tools )) && [[ -x "$out/${tools[$i]}" && -f "$out/.complete" ]]; then
    continue
  fi
  echo "building ${tools[$i]} v$version" >&2
  started=$SECONDS
  module="$src"
  if [[ "${tools[$i]}" == etcd ]]; then module="$here"; fi
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/${tools[$i]}" "${packages[$i]}")
  echo "built ${tools[$i]} in $((SECONDS - started)) s ($(du -m "$out/${tools[$i]}" | cut -f1) MiB)" >&2
done
touch "$out/.complete" "$marker"
echo "$out"
