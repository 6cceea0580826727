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
#   - each image of a binary carries a signed CycloneDX SBOM naming that binary, and the
#     operator's names the kube crate at the version Cargo.lock pins;
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

kube_version="$(awk '/^name = "kube"$/ { getline; gsub(/"/, "", $3); print $3; exit }' "$root/Cargo.lock")"
for binary in "${RELEASE_BINARIES[@]}"; do
  image="$(grep -F "/initializer-dev/$binary@" "$release/images.txt")" || fail "the release has no image of $binary"
  sbom="$("$cosign" verify-attestation --key "$key" --type cyclonedx "${COSIGN_VERIFY[@]}" "${COSIGN_REGISTRY[@]}" \
    "$image" 2>/dev/null | head -n1 | jq -r .payload | base64 -d | jq .predicate)" \
    || fail "$image has no SBOM attestation that verifies with $key"
  [[ "$(jq -r .metadata.component.name <<<"$sbom")" == "$binary" ]] || fail "the SBOM of $image does not describe $binary"
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
echo "release $(basename "$release"): ${#images[@]} signatures, ${#RELEASE_BINARIES[@]} SBOMs, the CSV's and the examples' ${#named[@]} and the chart's 2 image references verified against $registry"
