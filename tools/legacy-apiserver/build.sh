#!/usr/bin/env bash
# Builds kube-apiserver v1.13.3, of the last minor that served Initializers
# (admissionregistration.k8s.io/v1alpha1, removed in 1.14), from the Go module proxy only, with
# today's Go, into target/tools/kube-apiserver-1.13, and prints the binary's path. 1.13.3 rather
# than 1.13.0: it is the first 1.13 release with the fix of kubernetes/kubernetes#71696 (a write
# that raced the end of its request was answered 200 with an empty body, seen here under load),
# and the packages kube-apiserver imports are pinned to the same revisions as in 1.13.0, so
# deps.txt serves both.
#
#   tools/legacy-apiserver/build.sh     # instant when already built
#
# 1.13 predates go.mod: it was built in GOPATH mode from a vendor/ tree pinned by
# Godeps/Godeps.json. The module zip of k8s.io/kubernetes@v1.13.3 has Godeps.json but no vendor/,
# so this script rebuilds that tree: the zip's source goes to a GOPATH under target/, vendor/k8s.io/*
# link to staging/ (as in the 1.13 repository), and every other repository kube-apiserver
# imports is copied from the module version deps.txt names (written by gen-deps.py from
# Godeps.json: the same commits, one named exception). The build is GOPATH mode
# (GO111MODULE=off), as 1.13's own was; Go's module and build caches are the usual ones.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
version=v1.13.3
cache="${LEGACY_APISERVER_CACHE:-$(cd "$here/../.." && pwd)/target/tools}"
out="$cache/kube-apiserver-1.13"
work="$cache/legacy-apiserver"
tree="$work/gopath/src/k8s.io/kubernetes"
one_build_at_a_time "$cache" legacy-apiserver

if [[ -x "$out" && "$(cat "$work/.complete" 2>/dev/null)" == "$version" ]]; then
  echo "$out"
  exit 0
fi
require_go kube-apiserver-1.13

# module_dir MODULE VERSION: the module's directory in Go's module cache, downloading it first;
# on failure, the proxy's answer.
module_dir() {
  local info
  info="$(go mod download -json "$1@$2" 2>&1)" || true
  if ! grep -q '"Dir"' <<<"$info"; then
    echo "the Go module proxy refused $1@$2:" >&2
    sed -n 's/.*"Error": "\(.*\)".*/\1/p' <<<"$info" >&2
    exit 1
  fi
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info"
}

started=$SECONDS
rm -rf "$work" && mkdir -p "$(dirname "$tree")"
cp -r "$(module_dir k8s.io/kubernetes "$version")" "$tree"
chmod -R u+w "$tree"
mkdir -p "$tree/vendor/k8s.io"
for staged in "$tree"/staging/src/k8s.io/*; do
  ln -s "../../staging/src/k8s.io/${staged##*/}" "$tree/vendor/k8s.io/${staged##*/}"
done
count=0
while read -r repository module module_version subdirectory _; do
  [[ -z "$repository" || "$repository" == \#* ]] && continue
  dir="$(module_dir "$module" "$module_version")"
  mkdir -p "$(dirname "$tree/vendor/$repository")"
  cp -r "$dir/$subdirectory" "$tree/vendor/$repository"
  count=$((count + 1))
done < "$here/deps.txt"
chmod -R u+w "$tree/vendor"
echo "vendor tree of $count repositories ready in $((SECONDS - started)) s" >&2

export GO111MODULE=off GOPATH="$work/gopath" GOFLAGS="-p=2 -buildvcs=false" CGO_ENABLED=0

# pkg/generated/openapi/zz_generated.openapi.go is generated, not in the source: 1.13's
# build/root/Makefile.generated_files ran openapi-gen on every directory with a
# `+k8s:openapi-gen=` tag (staging/ named as vendor/). The same here; its report of API rule
# violations must equal the checked-in list, as that Makefile checked.
started=$SECONDS
(cd "$tree" && go build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
inputs="$(cd "$tree" && find -H . \( -path ./vendor -o -path './_*' -o -path './.*' -o -path ./docs \) -prune \
    -o -type f -name '*.go' -print | sed 's|^\./staging/src|vendor|; s|^\./||' \
  | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' | xargs -n1 dirname \
  | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)"
(cd "$tree" && "$work/openapi-gen" --logtostderr -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi \
  -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
  -r "$work/violations.report" 2>"$work/openapi-gen.log") || { cat "$work/openapi-gen.log" >&2; exit 1; }
diff "$work/violations.report" "$tree/api/api-rules/violation_exceptions.list" >&2 \
  || { echo "openapi-gen's API rule violations differ from 1.13's list" >&2; exit 1; }
echo "generated the OpenAPI definitions ($(tr , '\n' <<<"$inputs" | wc -l) packages) in $((SECONDS - started)) s" >&2

# The stamps 1.13's hack/lib/version.sh sets, in both places it sets them.
ldflags="-s -w"
for package in k8s.io/kubernetes/pkg/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=13"
  ldflags+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
done
echo "building kube-apiserver $version (GOPATH mode, $(go env GOVERSION))" >&2
started=$SECONDS
(cd "$tree" && go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/kube-apiserver)
echo "built kube-apiserver $version in $((SECONDS - started)) s ($(du -m "$out" | cut -f1) MiB)" >&2
echo "$version" >"$work/.complete"
echo "$out"
