#!/usr/bin/env bash
# Builds krew (as kubectl-krew) and krew's manifest validator (validate-krew-manifest) from krew's
# official Go module (sigs.k8s.io/krew, pinned in go.mod beside this script) into
# target/tools/krew/<version>/, and prints that directory.
#
#   tools/krew/build.sh     # instant when that version is already built
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
version="$(sed -n 's#^require sigs.k8s.io/krew \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$version" ]] || { echo "failed to read krew's version from $here/go.mod" >&2; exit 1; }
cache="${KREW_TOOLS_CACHE:-$(cd "$here/../.." && pwd)/target/tools/krew}"
out="$cache/$version"
one_build_at_a_time "$cache" krew

if [[ -x "$out/kubectl-krew" && -x "$out/validate-krew-manifest" && -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
require_go krew

download_modules krew "$version" "$here"

mkdir -p "$out"
echo "building krew $version" >&2
(cd "$here" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$version" \
  -o "$out/kubectl-krew" sigs.k8s.io/krew/cmd/krew)
(cd "$here" && go build -trimpath -ldflags "-s -w" \
  -o "$out/validate-krew-manifest" sigs.k8s.io/krew/cmd/validate-krew-manifest)
touch "$out/.complete"
echo "$out"
