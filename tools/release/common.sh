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
  COSIGN_REGISTRY=()
  HELM_REGISTRY=()
  OPM_REGISTRY=()
  if release_loopback "$1"; then
    COSIGN_REGISTRY=(--allow-http-registry)
    HELM_REGISTRY=(--plain-http)
    OPM_REGISTRY=(--use-http)
  fi
}

# release_loopback REGISTRY: whether REGISTRY (a host, with or without its port) is on the
# loopback interface: an IPv4 address of 127.0.0.0/8, localhost or [::1], exactly
# (127.0.0.1.example.com is not).
release_loopback() {
  [[ "$1" =~ ^(127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|localhost|\[::1\])(:[0-9]+)?$ ]]
}

# Signing with a key, offline: a signing configuration with neither a transparency log nor a
# timestamp authority (what `cosign signing-config create` writes with no service), and
# verification that does not look for a transparency log entry.
# shellcheck disable=SC2034 # read by the scripts that source this file
COSIGN_SIGN=(--signing-config "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/signing-config.json" --yes)
# shellcheck disable=SC2034
COSIGN_VERIFY=(--insecure-ignore-tlog)

# release_checksums DIR: writes DIR/SHA256SUMS, the checksum of every file below DIR but the
# private key (what is published), in a stable order.
release_checksums() {
  local sums
  sums="$(mktemp)"
  (cd "$1" && find . -type f ! -name SHA256SUMS ! -name cosign.key -printf '%P\n' | LC_ALL=C sort \
    | xargs sha256sum >"$sums")
  chmod 0644 "$sums" && mv "$sums" "$1/SHA256SUMS"
}

# release_files DIR SUBDIR...: "SHA-256  PATH" of each file below DIR's SUBDIRs, PATH relative to
# DIR, sorted by path. Fails, naming it, on the first entry that is neither a file nor a
# directory (a link would be followed by whoever reads the release) or whose path holds anything
# but letters, digits and '.', '_', '-', '/': no file of a release does, and such a name would
# not survive a listing by lines.
release_files() {
  local dir="$1" odd
  shift
  odd="$(cd "$dir" && find "$@" -regextype posix-extended \
    \( \( ! -type f ! -type d \) -o ! -regex '[A-Za-z0-9._/-]+' \) -print -quit)" || return 1
  if [[ -n "$odd" ]]; then
    echo "$dir/$odd is not a plain file or directory of a release" >&2
    return 1
  fi
  (cd "$dir" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}
