#!/usr/bin/env bash
# Builds helm from its official Go module (helm.sh/helm/v4, pinned in go.mod beside this script)
# into target/tools/helm/v<version>/helm, and prints the binary's path.
#
#   tools/helm/build.sh        # instant when that version is already built
#
# Go's module and build caches are reused, so a rebuild after a wipe of ours costs only the link.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
version="$(sed -n 's#^\thelm.sh/helm/v4 \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$version" ]] || { echo "failed to read helm's version from $here/go.mod" >&2; exit 1; }
cache="${HELM_CACHE:-$(cd "$here/../.." && pwd)/target/tools/helm}"
out="$cache/$version"
one_build_at_a_time "$cache" helm

if [[ -x "$out/helm" && -f "$out/.complete" ]]; then
  echo "$out/helm"
  exit 0
fi
require_go helm

download_modules helm "$version" "$here"

mkdir -p "$out"
echo "building helm $version" >&2
started=$SECONDS
# The stamps helm's own Makefile sets for a release, so that `helm version` tells the truth (Helm 4
# reads the Kubernetes version `helm lint` checks deprecations against from its client-go module).
ldflags="-s -w \
 -X helm.sh/helm/v4/internal/version.version=$version \
 -X helm.sh/helm/v4/internal/version.metadata= \
 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v4/cmd/helm)
echo "built helm $version in $((SECONDS - started)) s ($(du -m "$out/helm" | cut -f1) MiB)" >&2
touch "$out/.complete"
echo "$out/helm"
