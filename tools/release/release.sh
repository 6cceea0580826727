#!/usr/bin/env bash
# make release REGISTRY=<host:port> [VERSION=<semver>]: a release a platform team pulls.
#
#   1. the six images (the operator, the preset, the four examples), each images/Dockerfile's
#      `prebuilt` target around a binary built here, pushed to REGISTRY/initializer-dev/<binary>
#      and read back by digest;
#   2. the bundle with every image named by its digest (`initializer-operator bundle --image`),
#      its image, and a file-based catalog of it (`opm render` of the bundle image, so OLM
#      unpacks that image) in a catalog image served by `opm serve`; both pushed;
#   3. the Helm chart generated from that bundle (its values name the digests), packaged and
#      pushed to oci://REGISTRY/charts/initializer-operator;
#   4. every image and the chart signed with cosign (the key in COSIGN_KEY, else one generated
#      into the release directory beside its public half), and each image given its SBOM
#      (CycloneDX: cargo-cyclonedx's for a binary of ours; for the bundle and the catalog, the
#      files they carry, the images the bundle deploys and the Go binaries the catalog runs,
#      image-sbom.sh) as a signed attestation;
#   5. the kubectl plugin's archive for this machine with a krew manifest naming its real sha256,
#      the examples with every image of ours by digest, and SHA256SUMS over the release's files.
#
# PREVIOUS_RELEASE=DIR, the release this version replaces (tools/release/previous.sh writes
# one), puts its bundle in the catalog with the upgrade edge to this one.
# Everything is written under target/release/<VERSION>/, or RELEASE_OUT (the tests' releases go
# there, never over yours), images.txt listing every pushed reference; `tools/release/verify.sh`
# checks a release against its registry. VERSION is the
# workspace's version (Cargo.toml): another version is built from its own tree. Plain HTTP is
# used only for a registry on the loopback interface. RELEASE_PROFILE=debug builds the binaries
# in the debug profile, stripped: for tests of the release machinery, never for a release.
# RELEASE_TARGET (a Rust target triple, aarch64-unknown-linux-gnu for linux/arm64) builds for
# another platform where that target's standard library is installed; each image is then built
# for its platform (`docker build --platform`).
# Needs a container engine (docker), Go (cosign, helm, opm and cyclonedx-gomod are built from
# their modules), jq and cargo (cargo-cyclonedx is installed into target/tools when missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=tools/release/common.sh
source "$here/common.sh"

registry="${REGISTRY:-}"
[[ -n "$registry" ]] || { echo "release: REGISTRY=<host:port> is required" >&2; exit 2; }
workspace_version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
version="${VERSION:-$workspace_version}"
if [[ "$version" != "$workspace_version" ]]; then
  echo "release: VERSION=$version is not the workspace's version ($workspace_version, Cargo.toml): a release of another version is built from its own tree" >&2
  exit 2
fi
# The upgrade edge: PREVIOUS_RELEASE names the directory of the release this version replaces
# (the CSV's spec.replaces; tools/release/previous.sh builds it); its bundle image joins the
# catalog, and the channel leads from it to this one, so OLM upgrades a Subscription at it.
previous_csv="" previous_bundle=""
if [[ -n "${PREVIOUS_RELEASE:-}" ]]; then
  replaces="$(sed -n 's/^  replaces: //p' "$root/bundles/initializer-operator/manifests/initializer-operator.clusterserviceversion.yaml")"
  previous_csv="$(sed -n 's/^  name: //p' "$PREVIOUS_RELEASE/bundle/manifests/initializer-operator.clusterserviceversion.yaml" 2>/dev/null | head -n1)"
  [[ -n "$replaces" && "$previous_csv" == "$replaces" ]] \
    || { echo "release: PREVIOUS_RELEASE is ${previous_csv:-no release}, and $version replaces ${replaces:-none}" >&2; exit 2; }
  previous_bundle="$(grep -F '/initializer-operator-bundle@' "$PREVIOUS_RELEASE/images.txt" || true)"
  [[ -n "$previous_bundle" ]] || { echo "release: PREVIOUS_RELEASE lists no bundle image in its images.txt" >&2; exit 2; }
fi
profile="${RELEASE_PROFILE:-release}"
[[ "$profile" == release || "$profile" == debug ]] \
  || { echo "release: RELEASE_PROFILE is release or debug, not '$profile'" >&2; exit 2; }
# The Rust target the binaries are built for (RELEASE_TARGET, a triple such as
# aarch64-unknown-linux-gnu; this machine's when unset) and the image platform it makes.
target="${RELEASE_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
case "$target" in
  x86_64-unknown-linux-gnu) platform=linux/amd64 ;;
  aarch64-unknown-linux-gnu) platform=linux/arm64 ;;
  *) echo "release: no image platform for the Rust target '$target'" >&2; exit 2 ;;
esac
# Cargo's target directory, where it puts the binaries (CARGO_TARGET_DIR is relative to the
# root, where cargo runs).
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
cargo_target=() bin="$target_dir/$profile"
if [[ -n "${RELEASE_TARGET:-}" ]]; then
  cargo_target=(--target "$target") bin="$target_dir/$target/$profile"
fi
cargo_profile=()
[[ "$profile" == debug ]] || cargo_profile=(--release)
docker="${DOCKER:-docker}"
cargo="${CARGO:-cargo}"
out="${RELEASE_OUT:-$root/target/release/$version}"
repository="$registry/initializer-dev"
release_registry "$registry"

log() { echo "release: $*" >&2; }

# The tools, each built or installed once per version.
tools="$("$here/build.sh")"
cosign="$tools/cosign"
helm="$("$root/tools/helm/build.sh")"
opm="$("$root/tools/olm/build.sh")/opm"

rm -rf "$out"
mkdir -p "$out"
: >"$out/images.txt"

# push IMAGE: pushes the tagged IMAGE and prints it by the digest the registry gave it.
push() {
  "$docker" push --quiet "$1" >/dev/null
  local digest
  digest="$("$docker" image inspect --format '{{join .RepoDigests "\n"}}' "$1" | grep -F "${1%:*}@" | head -n1)"
  [[ -n "$digest" ]] || { log "the registry gave no digest for $1"; exit 1; }
  echo "$digest"
}

# The runtime every image runs on: images/Dockerfile's pinned base where it can be pulled,
# else the same Debian packages assembled on this machine (e2e/kind/offline/images.sh).
runtime="$(sed -n 's/^ARG RUNTIME_IMAGE=//p' "$root/images/Dockerfile")"
if [[ -n "${RUNTIME_IMAGE:-}" ]]; then
  runtime="$RUNTIME_IMAGE"
elif ! "$docker" image inspect "$runtime" >/dev/null 2>&1 && ! "$docker" pull --quiet "$runtime" >/dev/null 2>&1; then
  log "cannot pull $runtime: the images run on the same packages built here"
  runtime="$("$root/e2e/kind/offline/images.sh" runtime)"
fi

# 1. The binaries and their images.
packages=()
for binary in "${RELEASE_BINARIES[@]}"; do packages+=(-p "$binary"); done
log "building ${RELEASE_BINARIES[*]} ($profile)"
if [[ "$profile" == release ]]; then
  # What images/Dockerfile builds: its link order and packed relocations (the runtime base's
  # glibc is 2.36), and the kubectl plugin.
  (cd "$root" && INITIALIZER_LINK_ORDER=1 INITIALIZER_PACK_RELOCS=1 \
    "$cargo" build -q --release "${cargo_target[@]}" "${packages[@]}" \
    && "$cargo" build -q --release "${cargo_target[@]}" -p kubectl-initializer)
else
  # The workspace's debug build, which the test suites build anyway, with the features they
  # build it with (the Makefile's WORKSPACE): a build of some packages alone, or of other
  # features, would compile the crates again.
  (cd "$root" && "$cargo" build -q "${cargo_target[@]}" --workspace \
    --features initializer-crds/generate --bins)
fi
# The bundle and chart are written by this machine's own build of the operator.
tool="$target_dir/$profile/initializer-operator"
[[ -x "$tool" ]] || (cd "$root" && "$cargo" build -q "${cargo_profile[@]}" -p initializer-operator)
context="$out/.image-context"
declare -A pinned
pins=()
for binary in "${RELEASE_BINARIES[@]}"; do
  rm -rf "$context" && mkdir -p "$context"
  cp "$bin/$binary" "$context/"
  if [[ "$profile" == debug ]]; then strip --strip-all "$context/$binary"; fi
  tag="$repository/$binary:$version"
  DOCKER_BUILDKIT=1 "$docker" build -q --platform "$platform" -f "$root/images/Dockerfile" --target prebuilt \
    --build-arg "RUNTIME_IMAGE=$runtime" --build-arg "BINARY=$binary" -t "$tag" "$context" >/dev/null
  pinned[$binary]="$(push "$tag")"
  pins+=(--image "$binary=${pinned[$binary]}")
  echo "${pinned[$binary]}" >>"$out/images.txt"
  log "pushed ${pinned[$binary]}"
done
rm -rf "$context"

# 2. The bundle by digest, its image, and the catalog of it.
"$tool" bundle --out "$out/bundle" "${pins[@]}" >/dev/null
rm -f "$out/bundle/.generated"
bundle_tag="$repository/initializer-operator-bundle:v$version"
"$docker" build -q -f "$out/bundle/bundle.Dockerfile" -t "$bundle_tag" "$out/bundle" >/dev/null
bundle_image="$(push "$bundle_tag")"
echo "$bundle_image" >>"$out/images.txt"
log "pushed $bundle_image"

channel="- name: initializer-operator.v$version"
bundle_images=("$bundle_image")
if [[ -n "$previous_bundle" ]]; then
  bundle_images=("$previous_bundle" "$bundle_image")
  channel="- name: $previous_csv"$'\n'"$channel"$'\n'"  replaces: $previous_csv"
fi

catalog="$out/catalog"
mkdir -p "$catalog/configs/initializer-operator"
# opm pulls through containers/image, which reads its signature policy from $HOME: one that
# accepts the bundles' repositories alone, in a home of its own.
opm_home="$out/.opm-home"
mkdir -p "$opm_home/.config/containers"
accepted=""
while read -r bundle_repository; do
  accepted+="${accepted:+, }\"$bundle_repository\": [{\"type\": \"insecureAcceptAnything\"}]"
done < <(printf '%s\n' "${bundle_images[@]%@*}" | sort -u)
printf '{"default": [{"type": "reject"}], "transports": {"docker": {%s}}}\n' "$accepted" \
  >"$opm_home/.config/containers/policy.json"
{
  "$opm" init initializer-operator --default-channel=candidate --output yaml
  for image in "${bundle_images[@]}"; do
    HOME="$opm_home" "$opm" render "$image" --output yaml "${OPM_REGISTRY[@]}"
  done
  printf -- '---\nschema: olm.channel\npackage: initializer-operator\nname: candidate\nentries:\n%s\n' "$channel"
} >"$catalog/configs/initializer-operator/catalog.yaml"
"$opm" validate "$catalog/configs"
rm -rf "$opm_home"
cp "$opm" "$tools/grpc_health_probe" "$catalog/"
catalog_tag="$repository/initializer-operator-catalog:v$version"
"$docker" build -q --platform "$platform" -f "$here/catalog.Dockerfile" --build-arg "RUNTIME_IMAGE=$runtime" \
  -t "$catalog_tag" "$catalog" >/dev/null
rm "$catalog/opm" "$catalog/grpc_health_probe"
catalog_image="$(push "$catalog_tag")"
echo "$catalog_image" >>"$out/images.txt"
log "pushed $catalog_image"

# The examples, each image of ours named by the release's digest (`kubectl apply -f` them after
# an install from this release).
mkdir -p "$out/examples"
for example in "$root"/examples/*.yaml; do
  pinned_example="$out/examples/$(basename "$example")"
  cp "$example" "$pinned_example"
  for binary in "${RELEASE_BINARIES[@]}"; do
    sed -i "s|ghcr.io/initializer-dev/$binary:$version|${pinned[$binary]}|g" "$pinned_example"
  done
done

# 3. The chart, from the bundle above.
"$tool" chart --bundle "$out/bundle" --out "$out/chart/initializer-operator" >/dev/null
rm -f "$out/chart/initializer-operator/.generated"
"$helm" package "$out/chart/initializer-operator" --destination "$out" >/dev/null
chart_archive="$out/initializer-operator-$version.tgz"
chart_push="$("$helm" push "$chart_archive" "oci://$registry/charts" "${HELM_REGISTRY[@]}" 2>&1)"
chart_digest="$(sed -n 's/^Digest: //p' <<<"$chart_push")"
[[ -n "$chart_digest" ]] || { log "helm push printed no digest: $chart_push"; exit 1; }
chart_image="$registry/charts/initializer-operator@$chart_digest"
echo "$chart_image" >>"$out/images.txt"
log "pushed the chart $chart_image"

# 4. Signatures and SBOMs. A key given in COSIGN_KEY (its password in COSIGN_PASSWORD) signs;
# else a key pair is generated into the release, without a password, its public half beside it.
if [[ -n "${COSIGN_KEY:-}" ]]; then
  key="$COSIGN_KEY"
  "$cosign" public-key --key "$key" >"$out/cosign.pub"
else
  (cd "$out" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null 2>&1)
  key="$out/cosign.key"
  export COSIGN_PASSWORD=""
fi
# cosign_quiet ARGS...: cosign, its output shown only when it fails.
cosign_quiet() {
  local output
  output="$("$cosign" "$@" "${COSIGN_REGISTRY[@]}" 2>&1 </dev/null)" || { log "cosign $1 failed: $output"; exit 1; }
}
while read -r image; do
  cosign_quiet sign "${COSIGN_SIGN[@]}" --key "$key" "$image"
done <"$out/images.txt"
log "signed $(($(wc -l <"$out/images.txt") - 1)) images and the chart"
"$here/cyclonedx.sh" sbom "$root" "$out/sbom"
declare -A described
binary_images=()
for binary in "${RELEASE_BINARIES[@]}"; do
  described[$binary]="${pinned[$binary]}"
  binary_images+=("${pinned[$binary]}")
done
"$here/image-sbom.sh" bundle "$version" "$out/bundle" "${binary_images[@]}" \
  >"$out/sbom/initializer-operator-bundle.cdx.json"
described[initializer-operator-bundle]="$bundle_image"
"$here/image-sbom.sh" catalog "$version" "$catalog" "$opm" "$tools/grpc_health_probe" \
  >"$out/sbom/initializer-operator-catalog.cdx.json"
described[initializer-operator-catalog]="$catalog_image"
for name in "${!described[@]}"; do
  cosign_quiet attest "${COSIGN_SIGN[@]}" --key "$key" --type cyclonedx --predicate "$out/sbom/$name.cdx.json" \
    "${described[$name]}"
done
log "attached an SBOM to each of ${#described[@]} images"

# 5. The kubectl plugin for this machine, and its krew manifest.
plugin="$out/plugin"
mkdir -p "$plugin"
os="${platform%/*}" arch="${platform#*/}"
lines="$("$root/plugins/kubectl-initializer/krew/package.sh" "$bin/kubectl-initializer" "$os" "$arch" "$plugin")"
"$here/krew-manifest.sh" "$root/plugins/kubectl-initializer/krew/initializer.yaml" "$os" "$arch" \
  "$(sed -n 's/^ *sha256: "\(.*\)"$/\1/p' <<<"$lines")" >"$plugin/initializer.yaml"

release_checksums "$out"
log "release $version in $out"
