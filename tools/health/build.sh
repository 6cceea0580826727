#!/usr/bin/env bash
# Builds the health command (main.go: kstatus from sigs.k8s.io/cli-utils, and gopher-lua for
# Argo CD's health checks, pinned in go.mod beside this script) into
# target/tools/health/<digest>/health, and prints the binary's path.
#
#   tools/health/build.sh        # instant when built from these sources already
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
cache="${HEALTH_CACHE:-$(cd "$here/../.." && pwd)/target/tools/health}"
# Named by its sources: main.go is ours, go.sum pins everything else.
out="$cache/$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
one_build_at_a_time "$cache" health

if [[ -x "$out/health" && -f "$out/.complete" ]]; then
  echo "$out/health"
  exit 0
fi
require_go health
download_modules health "$(basename "$out")" "$here"
mkdir -p "$out"
started=$SECONDS
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/health" .)
echo "built health (kstatus, gopher-lua) in $((SECONDS - started)) s" >&2
touch "$out/.complete"
echo "$out/health"
