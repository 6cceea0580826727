#!/usr/bin/env bash
# Builds helm from its official Go module (helm.sh/helm/v3, pinned in go.mod beside this script)
# into target/tools/helm/v<version>/helm, and prints the binary's path.
#
#   tools/helm/build.sh        # instant when that version is already built
#
# Go's module and build caches are reused, so a rebuild after a wipe of ours costs only the link.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's#^\thelm.sh/helm/v3 \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$version" ]] || { echo "failed to read helm's version from $here/go.mod" >&2; exit 1; }
cache="${HELM_CACHE:-$(cd "$here/../.." && pwd)/target/tools/helm}"
out="$cache/$version"

if [[ -x "$out/helm" && -f "$out/.complete" ]]; then
  echo "$out/helm"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build helm (Go >= 1.25)" >&2; exit 1; }

if ! download="$(cd "$here" && go mod download 2>&1)"; then
  echo "failed to download helm's modules for $version:" >&2
  grep -E 'reading|not found|refused|410|404|403|verifying' <<<"$download" | head -n 5 >&2 || tail -n 5 <<<"$download" >&2
  exit 1
fi

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
