#!/usr/bin/env bash
# Builds the release's tools from their official Go modules, pinned in go.mod beside this script:
# cosign (github.com/sigstore/cosign/v3), distribution's registry
# (github.com/distribution/distribution/v3) and grpc_health_probe
# (github.com/grpc-ecosystem/grpc-health-probe, which OLM runs in a catalog image to probe it),
# into target/tools/release/<cosign>-<registry>-<probe>/, and prints that directory; or
# cyclonedx-gomod (github.com/CycloneDX/cyclonedx-gomod, which reads the SBOM of a Go binary),
# which only the release's SBOMs need, into target/tools/release/cyclonedx-gomod/<version>/, and
# prints its path.
#
#   tools/release/build.sh                   # instant when those versions are already built
#   tools/release/build.sh cyclonedx-gomod   # the same for cyclonedx-gomod
#
# Go's module and build caches are reused, so a rebuild after a wipe of target/ costs only the links.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
cosign="$(sed -n 's#^\tgithub.com/sigstore/cosign/v3 \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
registry="$(sed -n 's#^\tgithub.com/distribution/distribution/v3 \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
probe="$(sed -n 's#^\tgithub.com/grpc-ecosystem/grpc-health-probe \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$cosign" && -n "$registry" && -n "$probe" ]] \
  || { echo "failed to read cosign's, the registry's and grpc_health_probe's versions from $here/go.mod" >&2; exit 1; }
cache="${RELEASE_TOOLS_CACHE:-$(cd "$here/../.." && pwd)/target/tools/release}"
if [[ "${1:-}" == cyclonedx-gomod ]]; then
  gomod="$(sed -n 's#^\tgithub.com/CycloneDX/cyclonedx-gomod \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
  [[ -n "$gomod" ]] || { echo "failed to read cyclonedx-gomod's version from $here/go.mod" >&2; exit 1; }
  tool="$cache/cyclonedx-gomod/$gomod/cyclonedx-gomod"
  one_build_at_a_time "$cache/cyclonedx-gomod" cyclonedx-gomod
  if [[ ! -x "$tool" ]]; then
    require_go cyclonedx-gomod
    download_modules cyclonedx-gomod "$gomod" "$here"
    echo "building cyclonedx-gomod $gomod" >&2
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tool.partial" \
      github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod)
    mv "$tool.partial" "$tool"
  fi
  echo "$tool"
  exit 0
fi
out="$cache/$cosign-$registry-$probe"
one_build_at_a_time "$cache" release

if [[ -x "$out/cosign" && -x "$out/registry" && -x "$out/grpc_health_probe" && -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
require_go "cosign, the registry and grpc_health_probe"
download_modules "cosign, the registry and grpc_health_probe" "$cosign, $registry and $probe" "$here"

mkdir -p "$out"
started=$SECONDS
# The stamps their own Makefiles set, so that `cosign version` and `registry --version` tell the truth.
echo "building cosign $cosign" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$cosign -X sigs.k8s.io/release-utils/version.gitTreeState=clean" \
  -o "$out/cosign" github.com/sigstore/cosign/v3/cmd/cosign)
echo "building the registry $registry" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$registry -X github.com/distribution/distribution/v3/version.mainpkg=github.com/distribution/distribution/v3" \
  -o "$out/registry" github.com/distribution/distribution/v3/cmd/registry)
echo "building grpc_health_probe $probe" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.versionTag=$probe" \
  -o "$out/grpc_health_probe" github.com/grpc-ecosystem/grpc-health-probe)
echo "built cosign, the registry and grpc_health_probe in $((SECONDS - started)) s" >&2
touch "$out/.complete"
echo "$out"
