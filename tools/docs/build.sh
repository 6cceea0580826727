#!/usr/bin/env bash
# make docs: the user guide (docs/src, an mdBook) built into docs/book, then every link and
# anchor in the built pages checked offline, external links left alone. mdBook and lychee (the
# Rust ecosystem's link checker: it checks fragments against the ids of the pages it reads) come
# from crates.io at the versions below, installed into cargo's bin directory when missing or
# of another version: unoptimised and without debug info (they run for seconds), at the lowest
# CPU priority (CI builds them beside the e2e suites, in what those leave idle).
set -euo pipefail

MDBOOK_VERSION=0.5.4
LYCHEE_VERSION=0.24.2

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cargo="${CARGO:-cargo}"

# Installs crate $1 at version $2 (further arguments: its features) unless `$1 --version`
# already names that version.
ensure() {
  local tool="$1" version="$2"
  shift 2
  if "$tool" --version 2>/dev/null | grep -qw "v\?$version"; then
    return 0
  fi
  echo "docs: installing $tool $version from crates.io" >&2
  # In a directory of its own (cargo install's default), never CARGO_TARGET_DIR: the build would
  # wait on the workspace's builds there and leave its crates among theirs.
  nice -n 19 env -u CARGO_TARGET_DIR CARGO_PROFILE_DEV_DEBUG=0 "$cargo" install --quiet --debug --locked \
    "$tool@$version" "$@"
}

# Without the live-reload server and the file watcher: the book is built, not served.
ensure mdbook "$MDBOOK_VERSION" --no-default-features --features search
# Without e-mail checks (they go to the network).
ensure lychee "$LYCHEE_VERSION" --no-default-features

cd "$root"
rm -rf docs/book
mdbook build docs
# --offline: only links within the book (and to files beside it) are followed; --root-dir: a
# link from the site root (the 404 page's) resolves inside the book.
lychee --offline --include-fragments --no-progress --root-dir "$root/docs/book" docs/book
