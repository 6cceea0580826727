#!/usr/bin/env bash
# Builds helm from its official Go module (helm.sh/helm/v3, pinned in go.mod beside this script)
# into target/tools/helm/v<version>/helm, and prints the binary's path.
#
#   tools/helm/build.sh        # instant when that version is already built
#
# Go's module and build caches are reused, so a rebuild after a wipe of ours costs only the link.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
version="$(sed -n 's#^\thelm.sh/helm/v3 \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$version" ]] || { echo "failed to read helm's version from $here/go.mod" >&2; exit 1; }
cache="${HELM_CACHE:-$(cd "$here/../.." && pwd)/target/tools/helm}"
out="$cache/$version"

if [[ -x "$out/helm" && -f "$out/.complete" ]]; then
  echo "$out/helm"
  exit 0
fi
require_go helm

download_modules helm "$version" "$here"

mkdir -p "$out"
echo "building helm $version" >&2
started=$SECONDS
# The stamps helm's own Makefile sets: its version (so `helm version` tells the truth) and the
# Kubernetes version of its client-go (1.<minor>), which `helm lint` checks deprecations against.
client_go="$(sed -n 's#^\tk8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$here/go.mod")"
[[ -n "$client_go" ]] || { echo "failed to read k8s.io/client-go's version from $here/go.mod" >&2; exit 1; }
ldflags="-s -w \
 -X helm.sh/helm/v3/internal/version.version=$version \
 -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$client_go \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$client_go"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v3/cmd/helm)
echo "built helm $version in $((SECONDS - started)) s ($(du -m "$out/helm" | cut -f1) MiB)" >&2
touch "$out/.complete"
echo "$out/helm"
