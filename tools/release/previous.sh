#!/usr/bin/env bash
# The previous release, built from its own tree: what a real upgrade starts from.
#
#   REGISTRY=<host:port> RELEASE_OUT=DIR [RELEASE_PROFILE=debug] tools/release/previous.sh
#   tools/release/previous.sh --tree   # only the tree, ready for its own scripts; prints its path
#
# tools/release/previous names the previous release's version and the commit it was built from.
# That commit's tree is extracted from this clone's history (git archive) into
# target/previous/<commit>/, and that tree's own `make release` runs there (release.sh: its
# images, bundle, catalog and chart pushed to REGISTRY by digest, signed, with SBOMs), its
# binaries in its own target/ (never this tree's: both build binaries of the same names), its
# Go tools shared with this tree's target/tools. Its intermediate artifacts go to this tree's
# build directory (Cargo's build-dir): both trees pin the same third-party crates, so those
# compile once, for both, and only the previous tree's own crates build again; Cargo's
# fingerprints and its lock on that directory keep the two builds apart. The extracted tree and
# its build stay, so the next run rebuilds nothing. Prints the release directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# shellcheck source=tools/release/previous
source "$here/previous"
[[ -n "${PREVIOUS_VERSION:-}" && "${PREVIOUS_COMMIT:-}" =~ ^[0-9a-f]{40}$ ]] \
  || { echo "previous: $here/previous names no PREVIOUS_VERSION and PREVIOUS_COMMIT (40 hex digits)" >&2; exit 2; }
tree_only=0
[[ "${1:-}" == --tree ]] && tree_only=1
((tree_only)) || [[ -n "${REGISTRY:-}" && -n "${RELEASE_OUT:-}" ]] \
  || { echo "previous: REGISTRY=<host:port> and RELEASE_OUT=DIR are required" >&2; exit 2; }

log() { echo "previous: $*" >&2; }

# By its physical path: where target/previous is a link to a cache kept across clones (CI), the
# extracted tree and its crates' fingerprints stay the same from one clone to the next.
mkdir -p "$root/target/previous"
tree="$(cd "$root/target/previous" && pwd -P)/$PREVIOUS_COMMIT"
if [[ ! -f "$tree/.extracted" ]]; then
  git -C "$root" cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null \
    || { log "commit $PREVIOUS_COMMIT ($PREVIOUS_VERSION) is not in this clone's history: fetch it (git fetch --unshallow)"; exit 1; }
  rm -rf "$tree" && mkdir -p "$tree"
  git -C "$root" archive "$PREVIOUS_COMMIT" | tar -x -C "$tree"
  touch "$tree/.extracted"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$tree/Cargo.toml" | head -n1)"
[[ "$version" == "$PREVIOUS_VERSION" ]] \
  || { log "commit $PREVIOUS_COMMIT is version $version, not $PREVIOUS_VERSION"; exit 1; }
# The Go tools (helm, opm, cosign, the registry) are this tree's: built once, for both.
mkdir -p "$root/target/tools" "$tree/target"
ln -sfn "$(cd "$root/target/tools" && pwd -P)" "$tree/target/tools"
if ((tree_only)); then
  echo "$tree"
  exit 0
fi
log "release $PREVIOUS_VERSION from $PREVIOUS_COMMIT"
build_dir="${CARGO_BUILD_BUILD_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
env -u CARGO_TARGET_DIR CARGO_BUILD_BUILD_DIR="$build_dir" REGISTRY="$REGISTRY" \
  RELEASE_OUT="$RELEASE_OUT" RELEASE_PROFILE="${RELEASE_PROFILE:-release}" \
  "$tree/tools/release/release.sh"
echo "$RELEASE_OUT"
