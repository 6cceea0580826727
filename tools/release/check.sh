#!/usr/bin/env bash
# make release-check: `make release` against a registry of its own, then the checks a platform
# team runs before installing (verify.sh), then the same checks made to fail:
#
#   1. first, that plain HTTP is chosen only for registries on the loopback interface
#      (release_loopback: 127.0.0.1.example.com is not one); then a container engine (the one
#      that answers, else dockerd, as make e2e-kind starts it) and
#      distribution's registry started on a free loopback port, its storage in a temporary
#      directory (what this started is stopped and removed at the end: success, failure or
#      Ctrl-C);
#   2. tools/release/release.sh to it (RELEASE_PROFILE=debug unless set: this checks the
#      machinery, not the optimiser), then tools/release/verify.sh, which must pass;
#   3. verify.sh must refuse, naming what it refuses: the release checked with another key; a
#      CSV that names an image pushed to the same repository but never signed (its checksums
#      written again, as whoever can change the files can); a changed file under the original
#      checksums; a CSV whose permissions grow, its checksums written again (the signed bundle
#      image's SBOM lists the CSV that was released); a link among the bundle's manifests; a chart whose digest is not the release's;
#      a CSV naming an image from another registry, the release's list unchanged. The release is
#      written to a temporary directory, never over target/release.
#
# Needs what release.sh needs (a container engine, Go, cargo) and jq, curl.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
docker="${DOCKER:-docker}"
tools="$("$here/build.sh")"
work="$(mktemp -d)"
registry_pid=""
engine_started=0
cleanup() {
  if [[ -n "$registry_pid" ]]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  if [[ "$engine_started" == 1 ]]; then "$root/e2e/kind/offline/engine.sh" stop || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The engine that answers, else dockerd started here and stopped at the end (as make e2e-kind).
if ! "$docker" info >/dev/null 2>&1; then
  "$root/e2e/kind/offline/engine.sh" start
  engine_started=1
fi

log() { echo "release-check: $*" >&2; }

# Plain HTTP only on the loopback interface: a name that merely starts like a loopback address
# gets TLS.
# shellcheck source=tools/release/common.sh
source "$here/common.sh"
for registry in 127.0.0.1:5000 127.0.0.1 127.9.9.9:80 localhost:5001 localhost "[::1]:5000" "[::1]"; do
  release_loopback "$registry" || { log "FAIL: $registry is on the loopback interface"; exit 1; }
done
for registry in 127.0.0.1.example.com:5000 localhost.example.com "[::1]x:5000" 127.1:5000 \
    registry.example.com:5000 10.0.0.1:5000 "127.0.0.1:5000/path"; do
  ! release_loopback "$registry" || { log "FAIL: $registry would be reached over plain HTTP"; exit 1; }
done

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
registry="127.0.0.1:$port"
cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $work/storage
http:
  addr: $registry
EOF
"$tools/registry" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 50); do
  curl -sf "http://$registry/v2/" >/dev/null && break
  sleep 0.1
done
curl -sf "http://$registry/v2/" >/dev/null || { cat "$work/registry.log" >&2; log "the registry did not start"; exit 1; }
log "registry on $registry"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
REGISTRY="$registry" RELEASE_PROFILE="${RELEASE_PROFILE:-debug}" RELEASE_OUT="$work/out" "$here/release.sh"
release="$work/out"
"$here/verify.sh" "$release" "$release/cosign.pub"

# refused WHAT TEXT DIR [KEY]: verify.sh on DIR must fail and say TEXT.
refused() {
  local what="$1" text="$2" output
  shift 2
  if output="$("$here/verify.sh" "$@" 2>&1)"; then
    log "FAIL: verify.sh accepted $what"
    exit 1
  fi
  grep -qF -- "$text" <<<"$output" || { log "FAIL: verify.sh refused $what without saying '$text': $output"; exit 1; }
  log "refused $what: $output"
}

(cd "$work" && COSIGN_PASSWORD="" "$tools/cosign" generate-key-pair >/dev/null 2>&1)
refused "the release checked with another key" "does not verify with $work/cosign.pub" "$release" "$work/cosign.pub"

# An image that is not the release's, pushed to the operator's repository: a new layer on the
# operator's image, so it has a digest of its own and no signature.
copy="$work/release"
cp -a "$release" "$copy"
operator="$(grep -F '/initializer-dev/initializer-operator@' "$release/images.txt")"
printf 'FROM %s\nLABEL org.opencontainers.image.description=not-the-release\n' "$operator" \
  | "$docker" build -q -t "${operator%@*}:unsigned" - >/dev/null
"$docker" push --quiet "${operator%@*}:unsigned" >/dev/null
unsigned="$("$docker" image inspect --format '{{join .RepoDigests "\n"}}' "${operator%@*}:unsigned" | grep -vF "$operator" | grep -F "${operator%@*}@" | head -n1)"
[[ -n "$unsigned" && "$unsigned" != "$operator" ]] || { log "failed to push an image beside the operator's"; exit 1; }
sed -i "s|$operator|$unsigned|g" "$copy/images.txt" "$copy/bundle/manifests/"*.clusterserviceversion.yaml
release_checksums "$copy"
refused "an unsigned image in the CSV" "the signature of $unsigned does not verify" "$copy" "$release/cosign.pub"
"$docker" image rm "${operator%@*}:unsigned" >/dev/null

rm -rf "$copy" && cp -a "$release" "$copy"
sed -i "s|$operator|${operator%@*}:$version|g" "$copy/bundle/manifests/"*.clusterserviceversion.yaml
refused "a changed CSV under the original checksums" "does not match SHA256SUMS" "$copy" "$release/cosign.pub"

# What the images do not name: a rule of the CSV that grants every verb, all checksums again.
rm -rf "$copy" && cp -a "$release" "$copy"
sed -i '0,/^\( *\)- get$/s//\1- "*"/' "$copy/bundle/manifests/"*.clusterserviceversion.yaml
! cmp -s "$release/bundle/manifests/"*.clusterserviceversion.yaml "$copy/bundle/manifests/"*.clusterserviceversion.yaml \
  || { log "failed to change the CSV's permissions"; exit 1; }
release_checksums "$copy"
refused "a CSV granting more, its checksums written again" \
  "$copy/bundle/manifests/initializer-operator.clusterserviceversion.yaml is not what the signed SBOM of" \
  "$copy" "$release/cosign.pub"

# A manifest the checksums cannot see: a link (install --bundle would read what it points to).
rm -rf "$copy" && cp -a "$release" "$copy"
ln -s ../../chart/initializer-operator/values.yaml "$copy/bundle/manifests/zz-extra.yaml"
refused "a link among the bundle's manifests" \
  "$copy/bundle/manifests/zz-extra.yaml is not a plain file or directory of a release" "$copy" "$release/cosign.pub"

rm -rf "$copy" && cp -a "$release" "$copy"
sed -i 's|^  digest: sha256:[0-9a-f]*$|  digest: sha256:'"$(printf '0%.0s' $(seq 64))"'|' "$copy/chart/initializer-operator/values.yaml"
release_checksums "$copy"
refused "a chart that names another digest" "not an image of the release" "$copy" "$release/cosign.pub"

# An image from elsewhere in the CSV's Deployment, the release's list left as it was.
rm -rf "$copy" && cp -a "$release" "$copy"
sed -i "0,\|image: $operator|s||image: registry.example.com/other/operator:latest|" \
  "$copy/bundle/manifests/"*.clusterserviceversion.yaml
release_checksums "$copy"
refused "an image from another registry in the CSV" \
  "names registry.example.com/other/operator:latest, which is not an image of the release" "$copy" "$release/cosign.pub"
log "release $version: made, verified, and each of 7 tampered copies refused"
