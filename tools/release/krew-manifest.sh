#!/usr/bin/env bash
# The release's krew manifest: the committed one (plugins/kubectl-initializer/krew/initializer.yaml)
# with only the platform this release built, its archive's real sha256 in place of the zeros.
#
#   tools/release/krew-manifest.sh MANIFEST OS ARCH SHA256 > initializer.yaml
#
# A platform is one `- selector:` block under `platforms:`; the blocks of other platforms are
# left out, since a manifest must not promise an archive the release does not have.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 MANIFEST OS ARCH SHA256" >&2; exit 2; }
manifest="$1" os="$2" arch="$3" sum="$4"
[[ "$sum" =~ ^[0-9a-f]{64}$ ]] || { echo "krew-manifest: '$sum' is not a sha256" >&2; exit 2; }
awk -v os="$os" -v arch="$arch" -v sum="$sum" '
  function flush() {
    if (block != "" && block ~ ("\n        os: " os "\n") && block ~ ("\n        arch: " arch "\n")) {
      sub(/sha256: "0+"/, "sha256: \"" sum "\"", block)
      printf "%s", block
      kept++
    }
    block = ""
  }
  /^  platforms:$/ { print; in_platforms = 1; next }
  in_platforms && /^  - selector:$/ { flush() }
  in_platforms && /^  [^ -]/ { flush(); in_platforms = 0 }
  in_platforms { block = block $0 "\n"; next }
  { print }
  END { flush(); if (kept != 1) { print "krew-manifest: no platform " os "/" arch " in the manifest" > "/dev/stderr"; exit 1 } }
' "$manifest"
