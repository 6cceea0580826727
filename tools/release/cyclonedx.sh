#!/usr/bin/env bash
# cargo-cyclonedx, the CycloneDX project's SBOM generator for Rust (crates.io), installed once
# into target/tools/release/cargo-cyclonedx/<version>/, then either of:
#
#   tools/release/cyclonedx.sh                       # prints the installed binary's path
#   tools/release/cyclonedx.sh sbom WORKSPACE DIR    # an SBOM per binary that ships as an image:
#                                                    # DIR/<binary>.cdx.json (CycloneDX 1.5, JSON)
#
# Each SBOM lists the crates the binary is built from (normal dependencies, for this target,
# build-time ones left out), with their versions and package URLs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=0.5.9
cache="${CYCLONEDX_CACHE:-$(cd "$here/../.." && pwd)/target/tools/release/cargo-cyclonedx}"
bin="$cache/$version/bin/cargo-cyclonedx"
if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  exec {lock}>"$cache/.build-lock"
  flock "$lock"
  if [[ ! -x "$bin" ]]; then
    echo "installing cargo-cyclonedx $version" >&2
    # In a build directory of its own, never CARGO_TARGET_DIR (see tools/docs/build.sh).
    env -u CARGO_TARGET_DIR CARGO_PROFILE_DEV_DEBUG=0 \
      cargo install -q --debug --locked "cargo-cyclonedx@$version" --root "$cache/$version"
  fi
fi
if [[ "${1:-}" != sbom ]]; then
  echo "$bin"
  exit 0
fi
[[ $# -eq 3 ]] || { echo "usage: $0 sbom WORKSPACE DIR" >&2; exit 2; }
workspace="$2" dir="$3"
# shellcheck source=tools/release/common.sh
source "$here/common.sh"
# It writes <bin>_bin.cdx.json beside every member's Cargo.toml: ours are moved out, the rest
# removed.
marker="$(mktemp)"
trap 'rm -f "$marker"' EXIT
"$bin" cyclonedx --manifest-path "$workspace/Cargo.toml" --format json --spec-version 1.5 \
  --no-build-deps --describe binaries -q
mkdir -p "$dir"
for binary in "${RELEASE_BINARIES[@]}"; do
  found="$(find "$workspace" -path "$workspace/target" -prune -o -name "${binary}_bin.cdx.json" -newer "$marker" -print)"
  [[ -n "$found" ]] || { echo "cargo-cyclonedx wrote no SBOM for $binary" >&2; exit 1; }
  mv "$found" "$dir/$binary.cdx.json"
done
find "$workspace" -path "$workspace/target" -prune -o -name '*_bin.cdx.json' -newer "$marker" -print0 | xargs -0 -r rm -f
