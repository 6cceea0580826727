#!/usr/bin/env bash
# Runs the official operator-framework bundle validators (this directory's Go module) on a bundle:
#
#   tools/olm-validate/run.sh bundles/initializer-operator
#   tools/olm-validate/run.sh --build      # only build it
#
# Builds target/tools/olm-validate first when it is missing or older than its sources (Go's
# module and build caches make a rebuild cost only the link). Exits non-zero on any error, or on a
# warning outside the allow-list in main.go.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../../target/tools/olm-validate"
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUNDLE_DIR [olm-validate flags]" >&2
  exit 2
fi
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
one_build_at_a_time "$(dirname "$bin")" olm-validate
stale=0
if [[ ! -x "$bin" ]]; then
  stale=1
else
  for source in "$here"/main.go "$here"/go.mod "$here"/go.sum; do
    if [[ "$source" -nt "$bin" ]]; then
      stale=1
    fi
  done
fi
if [[ "$stale" == 1 ]]; then
  command -v go >/dev/null || { echo "go is required to build the OLM validators (Go >= 1.26)" >&2; exit 1; }
  mkdir -p "$(dirname "$bin")"
  # OLM's own flags (tools/olm/build.sh), with which the packages both use are compiled once.
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -o "$bin" .)
fi
[[ "$1" == --build ]] && exit 0
bundle="$1"
shift
exec "$bin" "$@" "$bundle"
