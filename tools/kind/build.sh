#!/usr/bin/env bash
# Builds what the offline kind path needs from Go modules (go.mod in this directory pins each):
# the kind command, CoreDNS and crictl, and kube-router (kube-router/go.mod, a module of its
# own), into target/kind/bin, and prints that directory.
# Instant when built; Go's module and build caches are shared with the other Go-built tools.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
out="${KIND_BIN_DIR:-$here/../../target/kind/bin}"
one_build_at_a_time "$out" kind
marker="$out/.complete-$(cat "$here/go.mod" "$here/coredns/main.go" "$here/kube-router/go.mod" | sha256sum | cut -c1-16)"
if [[ -f "$marker" ]]; then
  echo "$out"
  exit 0
fi
require_go kind
download_modules "kind, CoreDNS and crictl" "$(sed -n 's#^\tsigs.k8s.io/kind \(v[^ ]*\).*#\1#p' "$here/go.mod")" "$here"
download_modules kube-router "$(sed -n 's#^\tgithub.com/cloudnativelabs/kube-router/v2 \(v[^ ]*\).*#\1#p' "$here/kube-router/go.mod")" "$here/kube-router"
mkdir -p "$out"
declare -A packages=(
  [kind]=sigs.k8s.io/kind
  [coredns]=./coredns
  [crictl]=sigs.k8s.io/cri-tools/cmd/crictl
  [kube-router]=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
)
declare -A modules=([kube-router]="$here/kube-router")
for tool in kind coredns crictl kube-router; do
  echo "building $tool" >&2
  started=$SECONDS
  (cd "${modules[$tool]:-$here}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$tool" "${packages[$tool]}")
  echo "built $tool in $((SECONDS - started)) s" >&2
done
rm -f "$out"/.complete-*
touch "$marker"
echo "$out"
