#!/usr/bin/env bash
# Checks a release the way a platform team does before installing it, against the registry it was
# pushed to:
#
#   tools/release/verify.sh RELEASE_DIR PUBLIC_KEY
#
# PUBLIC_KEY is the publisher's key as you obtained it apart from the release (its cosign.pub
# proves nothing about a directory whoever can change the files can also re-sign).
#   - every file SHA256SUMS lists has that checksum, and the krew manifest names its archive's;
#   - every image and the chart (images.txt) is named by digest, served by the registry, and
#     its signature verifies with PUBLIC_KEY;
#   - every image carries a signed CycloneDX SBOM: each image of a binary's names that binary
#     (the operator's, the kube crate at the version Cargo.lock pins); the bundle image's lists
#     exactly the files of the release's bundle/ and the release's images of a binary; the
#     catalog image's, exactly the files of its catalog/configs/, and opm and grpc_health_probe at
#     the versions tools/olm/go.mod and tools/release/go.mod pin;
#   - the bundle's CSV, the examples and the chart's values name only images of the release, by
#     digest.
#
# Exits non-zero naming the first image, file or reference that fails, so that an install
# guarded by it never runs an image whose signature does not verify.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=tools/release/common.sh
source "$here/common.sh"
[[ $# -eq 2 ]] || { echo "usage: $0 RELEASE_DIR PUBLIC_KEY (the publisher's key, obtained apart from the release)" >&2; exit 2; }
release="$(cd "$1" && pwd)"
key="$2"
cosign="$("$here/build.sh")/cosign"
command -v jq >/dev/null || { echo "verify: jq is required" >&2; exit 1; }

fail() { echo "verify: $*" >&2; exit 1; }

[[ -f "$key" ]] || fail "no public key at $key"
(cd "$release" && sha256sum --quiet -c SHA256SUMS) || fail "a file of $release does not match SHA256SUMS"
archive="$(find "$release/plugin" -name '*.tar.gz' | head -n1)"
sum="$(sha256sum "$archive" | cut -d' ' -f1)"
grep -qF "sha256: \"$sum\"" "$release/plugin/initializer.yaml" \
  || fail "the krew manifest does not name the sha256 of $(basename "$archive") ($sum)"

mapfile -t images <"$release/images.txt"
((${#images[@]} > 0)) || fail "$release/images.txt lists no image"
registry="${images[0]%%/*}"
release_registry "$registry"
scheme=https
((${#HELM_REGISTRY[@]} == 0)) || scheme=http

for image in "${images[@]}"; do
  [[ "$image" =~ ^[^@]+@sha256:[0-9a-f]{64}$ ]] || fail "$image is not named by digest"
  [[ "${image%%/*}" == "$registry" ]] || fail "$image is not in the release's registry $registry"
  path="${image#*/}"
  status="$(curl -s -o /dev/null -w '%{http_code}' -I \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
    "$scheme://$registry/v2/${path%@*}/manifests/${image#*@}")"
  [[ "$status" == 200 ]] || fail "the registry does not serve $image (HTTP $status)"
  "$cosign" verify --key "$key" "${COSIGN_VERIFY[@]}" "${COSIGN_REGISTRY[@]}" "$image" >/dev/null 2>&1 \
    || fail "the signature of $image does not verify with $key"
done

# sbom NAME: the image of the release named NAME, and the SBOM its attestation carries once
# that verifies with the key (sets image and sbom). An image attested more than once by the key
# (a release made again to the same registry) has its first SBOM read.
sbom() {
  local attestations
  image="$(grep -F "/initializer-dev/$1@" "$release/images.txt")" || fail "the release has no image of $1"
  attestations="$("$cosign" verify-attestation --key "$key" --type cyclonedx "${COSIGN_VERIFY[@]}" \
    "${COSIGN_REGISTRY[@]}" "$image" 2>/dev/null)" || fail "$image has no SBOM attestation that verifies with $key"
  sbom="$(head -n1 <<<"$attestations" | jq -r .payload | base64 -d | jq .predicate)" \
    || fail "the SBOM attestation of $image is not a CycloneDX document"
  [[ "$(jq -r .metadata.component.name <<<"$sbom")" == "$1" ]] || fail "the SBOM of $image does not describe $1"
}
# carries DIR SUBDIR...: the SBOM's files must be exactly DIR's below those SUBDIRs (release_files:
# plain files and directories only), each with its SHA-256; else fails naming the first that
# differs.
carries() {
  local dir="$1" listed expected difference
  shift
  expected="$(release_files "$dir" "$@" | LC_ALL=C sort -k2)" || fail "$dir holds what no release holds"
  listed="$(jq -r '.components[] | select(.type == "file") | .hashes[0].content + "  " + .name' <<<"$sbom" \
    | LC_ALL=C sort -k2)"
  if [[ "$listed" != "$expected" ]]; then
    difference="$({ diff <(echo "$listed") <(echo "$expected") || true; } | sed -n 's/^[<>] [0-9a-f]*  //p' | head -n1)"
    fail "$dir/$difference is not what the signed SBOM of $image lists"
  fi
}
kube_version="$(awk '/^name = "kube"$/ { getline; gsub(/"/, "", $3); print $3; exit }' "$root/Cargo.lock")"
binary_images=()
for binary in "${RELEASE_BINARIES[@]}"; do
  sbom "$binary"
  binary_images+=("$image")
  if [[ "$binary" == initializer-operator ]]; then
    jq -e --arg v "$kube_version" '.components[] | select(.name == "kube" and .version == $v)' <<<"$sbom" >/dev/null \
      || fail "the SBOM of $image does not name kube $kube_version"
  fi
done
# Every image the CSV names (its Deployment's containers and `--preset-image`, `relatedImages`,
# `containerImage`, the example in `alm-examples`) and every example's `spec.image`, whatever
# its registry or shape: each must be one of the release's.
csv="$release/bundle/manifests/initializer-operator.clusterserviceversion.yaml"
values="$release/chart/initializer-operator/values.yaml"
mapfile -t named < <(
  sed -n -e 's/^ *\(- \)\{0,1\}image: *//p' -e 's/^ *containerImage: *//p' \
    -e 's/^ *"image": *"\([^"]*\)",\{0,1\}$/\1/p' -e '/^ *- --preset-image$/{n;s/^ *- *//p;}' "$csv"
  sed -n 's/^  image: *//p' "$release"/examples/*.yaml
)
((${#named[@]} >= 6)) || fail "the CSV and the examples name ${#named[@]} images, fewer than a release has"
for reference in "${named[@]}"; do
  grep -qxF -- "$reference" "$release/images.txt" \
    || fail "the CSV or an example names $reference, which is not an image of the release"
done
for group in image presetImage; do
  [[ "$(grep -c "^$group:" "$values")" == 1 ]] || fail "the chart's values have not one $group"
  repository="$(sed -n "/^$group:/,/^[^ ]/s/^  repository: //p" "$values")"
  digest="$(sed -n "/^$group:/,/^[^ ]/s/^  digest: //p" "$values")"
  [[ "$repository" != *$'\n'* && "$digest" != *$'\n'* ]] || fail "the chart's $group names more than one image"
  grep -qxF "$repository@$digest" "$release/images.txt" \
    || fail "the chart's $group is $repository@$digest, not an image of the release"
done
# What the release directory holds of the bundle and the catalog is what their signed images
# carry (who can rewrite the files and SHA256SUMS still cannot sign).
csv_version="$(sed -n 's/^  version: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$csv" | head -n1)"
sbom initializer-operator-bundle
bundle_image="$image"
[[ "$(jq -r .metadata.component.version <<<"$sbom")" == "$csv_version" ]] \
  || fail "the SBOM of $image is of another version than the CSV's $csv_version"
bundle_parts=(manifests metadata)
[[ ! -d "$release/bundle/tests" ]] || bundle_parts+=(tests)
carries "$release/bundle" "${bundle_parts[@]}"
[[ "$(jq -r '.components[] | select(.type == "container") | ."bom-ref"' <<<"$sbom" | sort)" \
    == "$(printf '%s\n' "${binary_images[@]}" | sort)" ]] \
  || fail "the SBOM of $image does not list the release's ${#binary_images[@]} images of a binary"
sbom initializer-operator-catalog
[[ "$(jq -r .metadata.component.version <<<"$sbom")" == "$csv_version" ]] \
  || fail "the SBOM of $image is of another version than the CSV's $csv_version"
carries "$release/catalog" configs
grep -rqxF -- "image: $bundle_image" "$release/catalog/configs" \
  || fail "the release's catalog does not name its bundle image $bundle_image"
for module in "github.com/operator-framework/operator-registry $root/tools/olm/go.mod" \
    "github.com/grpc-ecosystem/grpc-health-probe $root/tools/release/go.mod"; do
  read -r path go_mod <<<"$module"
  module_version="$(awk -v m="$path" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$go_mod")"
  jq -e --arg m "$path" --arg v "$module_version" \
    '.components[] | select(.type == "application" and .name == $m and .version == $v)' <<<"$sbom" >/dev/null \
    || fail "the SBOM of $image does not name $path $module_version"
done

echo "release $(basename "$release"): ${#images[@]} signatures, $((${#RELEASE_BINARIES[@]} + 2)) SBOMs, the CSV's and the examples' ${#named[@]} and the chart's 2 image references verified against $registry"
