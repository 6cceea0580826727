#!/usr/bin/env bash
# Packages a built kubectl-initializer as the krew archive of one platform and prints the
# manifest's uri and sha256 lines for it.
#
#   plugins/kubectl-initializer/krew/package.sh BINARY OS ARCH OUTDIR
#
# The archive holds the binary and the Apache-2.0 LICENSE (krew's validator requires a licence
# file), named as initializer.yaml's uris name them.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 BINARY OS ARCH OUTDIR" >&2; exit 2; }
binary="$1" os="$2" arch="$3" outdir="$4"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$binary" ]] || { echo "failed to find an executable at $binary" >&2; exit 1; }
version="$(sed -n 's/^  version: \(v[0-9.]*\)$/\1/p' "$here/initializer.yaml")"
[[ -n "$version" ]] || { echo "failed to read spec.version from $here/initializer.yaml" >&2; exit 1; }
license="$here/../../../LICENSE"
[[ -f "$license" ]] || license=/usr/share/common-licenses/Apache-2.0
[[ -f "$license" ]] || { echo "failed to find the Apache-2.0 licence text" >&2; exit 1; }

name="kubectl-initializer-$version-$os-$arch.tar.gz"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$binary" "$stage/kubectl-initializer"
cp "$license" "$stage/LICENSE"
mkdir -p "$outdir"
tar -C "$stage" -czf "$outdir/$name" kubectl-initializer LICENSE
sum="$(sha256sum "$outdir/$name" | cut -d' ' -f1)"
echo "    uri: https://github.com/initializer-dev/initializer-operator/releases/download/$version/$name"
echo "    sha256: \"$sum\""
