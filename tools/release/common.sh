# shellcheck shell=bash
# What the release scripts share (sourced, not run): the binaries that ship as images, and how
# each tool talks to the registry (plain HTTP only on the loopback interface).

# The binaries that ship as images (initializer_crds::images), in the order they are pushed.
# shellcheck disable=SC2034 # read by the scripts that source this file
RELEASE_BINARIES=(
  initializer-operator
  preset-initializer
  sidecar-initializer
  test-certs-initializer
  proxy-initializer
  secret-guard-initializer
)

# release_registry REGISTRY: sets COSIGN_REGISTRY, HELM_REGISTRY and OPM_REGISTRY, the flags
# cosign, helm and opm need to reach REGISTRY: plain HTTP for 127.0.0.0/8, localhost and [::1]
# only, TLS everywhere else.
release_registry() {
  local host="${1%:*}"
  COSIGN_REGISTRY=()
  HELM_REGISTRY=()
  OPM_REGISTRY=()
  case "$host" in
    127.*|localhost|\[::1\])
      COSIGN_REGISTRY=(--allow-http-registry)
      HELM_REGISTRY=(--plain-http)
      OPM_REGISTRY=(--use-http)
      ;;
  esac
}

# Signing with a key, offline: a signing configuration with neither a transparency log nor a
# timestamp authority (what `cosign signing-config create` writes with no service), and
# verification that does not look for a transparency log entry.
# shellcheck disable=SC2034 # read by the scripts that source this file
COSIGN_SIGN=(--signing-config "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/signing-config.json" --yes)
# shellcheck disable=SC2034
COSIGN_VERIFY=(--insecure-ignore-tlog)
