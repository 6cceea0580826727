#!/usr/bin/env bash
# Puts the vendored RustSec advisory database (snapshot/ beside this script) where cargo-deny opens
# it with fetching disabled (`cargo deny --offline`, as `make deny` runs it): a git repository
# under deny.toml's db-path, target/advisory-dbs, whose one commit carries the snapshot's date.
#
#   tools/advisory-db/install.sh    # instant when that repository already holds the snapshot
#
# cargo-deny 0.20 (src/git.rs, get_fetch_time) takes the database's age from the modification time
# of .git/FETCH_HEAD or, without one, from the later of HEAD's commit date and .git/HEAD's
# modification time; it refuses a database older than maximum-db-staleness. So the commit is
# dated as SOURCE says and .git/HEAD is given that time too: the age checked is the snapshot's,
# not that of the copy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# cargo-deny keeps a database in <db-path>/<last segment of its URL>-<xxhash64 of the URL>
# (src/advisories/helpers/db.rs, url_to_db_path); this is the directory of the default URL,
# https://github.com/RustSec/advisory-db, which deny.toml leaves as it is.
dest="$repo/target/advisory-dbs/advisory-db-3157b0e258782691"

commit="$(sed -n 's/^commit //p' "$here/SOURCE")"
date="$(sed -n 's/^date //p' "$here/SOURCE")"
[[ -n "$commit" && -n "$date" ]] || { echo "failed to read the snapshot's commit and date from $here/SOURCE" >&2; exit 1; }

# What the copy was made from: SOURCE and every vendored file's name and content.
stamp="$(cd "$here" && find SOURCE snapshot -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)"
if [[ ! -d "$dest/.git" || "$(cat "$dest.stamp" 2>/dev/null)" != "$stamp" ]]; then
  unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
  export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
  mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp -d "$dest.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"
  cp -R "$here/snapshot/." "$tmp"
  git -C "$tmp" init --quiet --initial-branch=main
  git -C "$tmp" -c core.excludesFile=/dev/null add --all --force
  GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
    git -C "$tmp" -c user.name=initializer-operator -c user.email=advisory-db@invalid \
    -c commit.gpgSign=false commit --quiet --no-verify \
    --message "RustSec advisory-db $commit, vendored in tools/advisory-db"
  touch -d "$date" "$tmp/.git/HEAD"
  rm -rf "$dest" "$dest.stamp"
  mv "$tmp" "$dest"
  echo "$stamp" >"$dest.stamp"
fi

# cargo-deny's own message for a snapshot past maximum-db-staleness says only "repository is
# stale"; say what to do.
max_days="$(sed -n 's/^maximum-db-staleness *= *"P\([0-9]*\)D".*/\1/p' "$repo/deny.toml")"
age_days=$((($(date +%s) - $(date -d "$date" +%s)) / 86400))
if [[ -n "$max_days" ]] && ((age_days >= max_days)); then
  echo "the vendored advisory database is $age_days days old (${date:0:10}), more than deny.toml's" \
    "maximum-db-staleness of $max_days days: refresh it where GitHub is reachable with" \
    "'make advisory-db' and commit tools/advisory-db (tools/advisory-db/README.md)" >&2
fi
