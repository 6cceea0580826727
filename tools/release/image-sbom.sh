#!/usr/bin/env bash
# The SBOMs of the release's two images that carry no binary of ours (CycloneDX 1.5, JSON, on
# standard output); cyclonedx.sh writes those of the six images that do.
#
#   tools/release/image-sbom.sh catalog VERSION DIR BINARY...
#       the catalog image: each file of DIR/configs (the file-based catalog) with its SHA-256,
#       and each Go binary it runs (opm, grpc_health_probe) as an application with the modules
#       it was built from, which cyclonedx-gomod reads out of the binary (`go version -m`);
#   tools/release/image-sbom.sh bundle VERSION DIR IMAGE...
#       the bundle image: each file it carries (DIR's manifests/, metadata/ and tests/, as
#       bundle.Dockerfile copies them) with its SHA-256, and each IMAGE its CSV names, by digest.
#
# The files listed let a release directory be checked against its signed images (verify.sh):
# who can rewrite the files and SHA256SUMS still cannot sign. cyclonedx-gomod comes from
# build.sh.
set -euo pipefail
# Its functions run in command substitutions, where a failure must stop the script too.
shopt -s inherit_errexit
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/release/common.sh
source "$here/common.sh"
usage() {
  echo "usage: $0 catalog VERSION DIR BINARY... | $0 bundle VERSION DIR IMAGE..." >&2
  exit 2
}
(($# >= 4)) || usage
kind="$1" version="$2" dir="$3"
shift 3
command -v jq >/dev/null || { echo "image-sbom: jq is required" >&2; exit 1; }
uuid="$(cat /proc/sys/kernel/random/uuid)"

# document NAME COMPONENTS DEPENDENCIES: the image's SBOM around its components and their
# dependencies (JSON arrays), the image the one component at the top.
document() {
  jq -n --arg name "$1" --arg version "$version" --arg serial "urn:uuid:$uuid" \
    --argjson components "$2" --argjson dependencies "$3" '{
      bomFormat: "CycloneDX", specVersion: "1.5", serialNumber: $serial, version: 1,
      metadata: {
        timestamp: (now | todate),
        component: {type: "container", "bom-ref": $name, name: $name, version: $version}
      },
      components: $components,
      dependencies: $dependencies
    }'
}

# files SUBDIR...: each file below DIR's SUBDIRs, by its path in the image, with its SHA-256.
files() {
  local listing found
  listing="$(release_files "$dir" "$@")" || exit 1
  found="$(jq -R -s 'split("\n") | map(select(. != "") | capture("^(?<sha>[0-9a-f]{64})  (?<path>.*)$")
    | {type: "file", "bom-ref": ("file:" + .path), name: .path, hashes: [{alg: "SHA-256", content: .sha}]})' \
    <<<"$listing")"
  [[ "$(jq length <<<"$found")" == "$(grep -c . <<<"$listing")" ]] \
    || { echo "image-sbom: a file of $dir was not listed" >&2; exit 1; }
  echo "$found"
}

case "$kind" in
  catalog)
    tool="$("$here/build.sh" cyclonedx-gomod)"
    boms="$(for binary in "$@"; do
      "$tool" bin -json -output-version 1.5 "$binary" 2>/dev/null \
        || { echo "image-sbom: cyclonedx-gomod read no modules from $binary" >&2; exit 1; }
    done | jq -s .)"
    # Both binaries may use the same module at the same version: one component, one entry in
    # the dependency graph, whose dependencies are the union of both.
    [[ -d "$dir/configs" ]] || { echo "image-sbom: $dir has no configs/" >&2; exit 1; }
    carried="$(files configs)"
    components="$(jq --argjson files "$carried" \
      '$files + ([.[].metadata.component] + [.[].components[]?] | unique_by(."bom-ref"))' <<<"$boms")"
    dependencies="$(jq --arg name initializer-operator-catalog '
      [{ref: $name, dependsOn: [.[].metadata.component."bom-ref"]}]
      + ([.[].dependencies[]?] | group_by(.ref) | map({ref: .[0].ref, dependsOn: ([.[].dependsOn[]?] | unique)}))' \
      <<<"$boms")"
    document initializer-operator-catalog "$components" "$dependencies"
    ;;
  bundle)
    [[ -d "$dir/manifests" && -d "$dir/metadata" ]] || { echo "image-sbom: $dir is not a bundle" >&2; exit 1; }
    parts=(manifests metadata)
    [[ ! -d "$dir/tests" ]] || parts+=(tests)
    # Each image by digest, named as the purl spec names an OCI artifact: its last path element,
    # the digest as version, the repository as repository_url.
    images="$(printf '%s\n' "$@" | jq -R -s 'split("\n") | map(select(. != "")
      | capture("^(?<repository>[^@]+)@(?<digest>sha256:[0-9a-f]{64})$")
      | (.repository | split("/") | last) as $last
      | {type: "container", "bom-ref": (.repository + "@" + .digest), name: $last, version: .digest,
         purl: ("pkg:oci/" + $last + "@" + (.digest | sub(":"; "%3A")) + "?repository_url=" + .repository)})')"
    (($# == $(jq length <<<"$images"))) || { echo "image-sbom: every IMAGE must be named by digest" >&2; exit 1; }
    carried="$(files "${parts[@]}")"
    document initializer-operator-bundle "$(jq -n --argjson f "$carried" --argjson i "$images" '$f + $i')" \
      "$(jq -n --argjson i "$images" '[{ref: "initializer-operator-bundle", dependsOn: [$i[]."bom-ref"]}]')"
    ;;
  *) usage ;;
esac
