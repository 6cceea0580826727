#!/usr/bin/env bash
# Builds OLM's `olm`, `catalog` and `cpb` (github.com/operator-framework/operator-lifecycle-manager)
# and `opm` (github.com/operator-framework/operator-registry) from their official Go modules,
# pinned in go.mod beside this script, with Debian's static busybox beside them, into
# target/tools/olm/<olm version>-<opm version>/, and prints that directory.
#
#   tools/olm/build.sh        # instant when those versions are already built
#
# A module of its own: both need k8s.io v0.36.x, the control plane's module pins v0.35.x. Go's
# module and build caches are shared with the other Go builds, so a rebuild after a wipe of
# target/ costs only the links. package-server is not built: nothing here serves its API.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../lib/go-tool.sh"
olm="$(sed -n 's#^\tgithub.com/operator-framework/operator-lifecycle-manager \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
opm="$(sed -n 's#^\tgithub.com/operator-framework/operator-registry \(v[0-9.]*\).*#\1#p' "$here/go.mod")"
[[ -n "$olm" && -n "$opm" ]] || { echo "failed to read OLM's and opm's versions from $here/go.mod" >&2; exit 1; }
# The CRDs of the two prometheus-operator kinds the bundle ships (PrometheusRule, ServiceMonitor):
# OLM installs every object of a bundle, so where monitoring.coreos.com/v1 is not served its
# InstallPlan fails; the scenarios give the cluster what a cluster with prometheus-operator has.
prometheus_operator=v0.88.0
cache="${OLM_CACHE:-$(cd "$here/../.." && pwd)/target/tools/olm}"
out="$cache/$olm-$opm-$prometheus_operator"
one_build_at_a_time "$cache" olm

if [[ -x "$out/olm" && -x "$out/catalog" && -x "$out/opm" && -x "$out/cpb" && -x "$out/busybox" && -d "$out/crds" && -d "$out/monitoring-crds" && -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
require_go OLM
command -v gcc >/dev/null || { echo "gcc is required to build opm (cgo: sqlite)" >&2; exit 1; }

download_modules OLM "$olm and opm $opm" "$here"

mkdir -p "$out"
started=$SECONDS
olm_pkg=github.com/operator-framework/operator-lifecycle-manager
opm_pkg=github.com/operator-framework/operator-registry
# The version stamps their own Makefiles set, so `olm --version` and `opm version` tell the truth.
echo "building olm and catalog $olm" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath -tags json1 \
  -ldflags "-s -w -X $olm_pkg/pkg/version.OLMVersion=$olm" \
  -o "$out/" "$olm_pkg/cmd/olm" "$olm_pkg/cmd/catalog")
echo "building opm $opm" >&2
# opm's sqlite is cgo (mattn/go-sqlite3); containers_image_openpgp keeps gpgme out.
(cd "$here" && CGO_ENABLED=1 go build -trimpath -tags json1,containers_image_openpgp \
  -ldflags "-s -w -X $opm_pkg/cmd/opm/version.gitCommit=$opm -X $opm_pkg/cmd/opm/version.opmVersion=$opm" \
  -o "$out/opm" "$opm_pkg/cmd/opm")
# What OLM's bundle unpack Job runs from its util image: `cpb`, which copies a bundle image's
# files, and `/bin/cp`, busybox's in OLM's own image and here Debian's static busybox.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/cpb" "$olm_pkg/util/cpb")
debs="$(mktemp -d)"
(cd "$debs" && apt-get download -q busybox-static >/dev/null 2>&1) \
  || { echo "failed to download Debian's busybox-static (apt-get download busybox-static)" >&2; exit 1; }
dpkg-deb -x "$debs"/busybox-static_*.deb "$debs/root"
install -m 0755 "$debs/root/bin/busybox" "$out/busybox"
echo "busybox: $(basename "$debs"/busybox-static_*.deb .deb)" >&2
rm -rf "$debs"
echo "built olm, catalog, opm and cpb in $((SECONDS - started)) s" >&2
# OLM's own CRDs, from the same module version (deploy/chart/crds; the quickstart's are stale).
crds="$(cd "$here" && go list -m -f '{{.Dir}}' "$olm_pkg")/deploy/chart/crds"
rm -rf "$out/crds"
mkdir -p "$out/crds"
cp "$crds"/*.crd.yaml "$out/crds/"
chmod u+w "$out/crds"/*.yaml
monitoring="$(cd "$out" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$prometheus_operator" \
  | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
[[ -n "$monitoring" ]] || { echo "failed to download prometheus-operator $prometheus_operator" >&2; exit 1; }
rm -rf "$out/monitoring-crds"
mkdir -p "$out/monitoring-crds"
cp "$monitoring"/example/prometheus-operator-crd/monitoring.coreos.com_{prometheusrules,servicemonitors}.yaml "$out/monitoring-crds/"
chmod u+w "$out/monitoring-crds"/*.yaml
touch "$out/.complete"
echo "$out"
