#!/usr/bin/env bash
# Replaces the vendored RustSec advisory database (snapshot/ beside this script) with the newest
# commit of a copy of https://github.com/rustsec/advisory-db, records that commit and its date in
# SOURCE, and rewrites the "advisory-db of <date> (commit <sha>)" phrases of the documents that
# name the snapshot. Run it where GitHub is reachable, then commit the result:
#
#   tools/advisory-db/refresh.sh                              # from GitHub
#   tools/advisory-db/refresh.sh /path/to/advisory-db         # from a clone or mirror (bare or not)
#   tools/advisory-db/refresh.sh https://example.org/advisory-db.git
#
# Only what cargo-deny reads is kept: every advisory under crates/ (not only those of Cargo.lock's
# crates, so that a dependency added later is checked too) and the license files (the database is
# CC0-1.0, advisories imported from GitHub's database CC-BY-4.0). The rust/ advisories (the
# toolchain's) and the repository's own documents are left out.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source_url="${1:-https://github.com/rustsec/advisory-db}"

unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

git clone --quiet --depth=1 --no-tags "$source_url" "$tmp/db" 2>"$tmp/clone.log" \
  || { cat "$tmp/clone.log" >&2; echo "failed to clone the advisory database from $source_url" >&2; exit 1; }
commit="$(git -C "$tmp/db" rev-parse HEAD)"
date="$(git -C "$tmp/db" show -s --format=%cI HEAD)"

mkdir "$tmp/snapshot"
git -C "$tmp/db" archive HEAD crates LICENSE.txt LICENSES | tar -x -C "$tmp/snapshot"
advisories="$(find "$tmp/snapshot/crates" -name '*.md' | wc -l)"
((advisories > 0)) || { echo "no advisory under crates/ in $source_url at $commit" >&2; exit 1; }

rm -rf "$here/snapshot"
mv "$tmp/snapshot" "$here/snapshot"
cat >"$here/SOURCE" <<SOURCE
# Written by refresh.sh: the commit of https://github.com/rustsec/advisory-db that snapshot/ holds
# and that commit's date, which install.sh gives the database cargo-deny opens (deny.toml's
# maximum-db-staleness is counted from it).
commit $commit
date $date
SOURCE

phrase="advisory-db of ${date:0:10} (commit ${commit:0:12})"
for doc in docs/src/security/supply-chain.md deny.toml tools/advisory-db/README.md; do
  sed -E -i "s/advisory-db of [0-9]{4}-[0-9]{2}-[0-9]{2} \(commit [0-9a-f]{12}\)/$phrase/g" "$repo/$doc"
  grep -qF "$phrase" "$repo/$doc" || echo "warning: $doc does not name the snapshot ($phrase)" >&2
done
echo "vendored $advisories advisories: $phrase"
