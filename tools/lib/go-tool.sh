# shellcheck shell=bash
# What every script that builds a tool from its official Go module shares (sourced, not run):
# the Go check and the module download with a short, readable failure. Go's module and build
# caches are reused, so a rebuild after a wipe of target/ costs only the link.

# The Go compiler and linker are Go programs: with the collector's target at 400 % instead of
# 100 % they spend a sixth less CPU on a cold build, for a little more memory (a cold crictl:
# 94 -> 78 s; kube-apiserver's link: 2.35 -> 2.54 GB). A GOGC set by the caller is kept.
export GOGC="${GOGC:-400}"

# require_go TOOL: fail naming TOOL when go is missing.
require_go() {
  command -v go >/dev/null || { echo "go is required to build $1 (Go >= 1.25)" >&2; exit 1; }
}

# download_modules TOOL VERSION DIR: `go mod download` in DIR; on failure, the lines that say
# why (a refused or missing version, a checksum mismatch) instead of the whole log.
download_modules() {
  local download
  if ! download="$(cd "$3" && go mod download 2>&1)"; then
    echo "failed to download $1's modules for $2:" >&2
    grep -E 'reading|not found|refused|410|404|403|verifying' <<<"$download" | head -n 5 >&2 \
      || tail -n 5 <<<"$download" >&2
    exit 1
  fi
}

# one_build_at_a_time DIR NAME: wait while another build of NAME writes to DIR, then hold the lock
# until this script exits. CI builds the tools in the background while its stages ask for them,
# and a second build of the same output beside the first would only repeat it; the waiter then
# finds the tool built and returns at once.
one_build_at_a_time() {
  mkdir -p "$1"
  exec {build_lock}>"$1/.$2.build-lock"
  flock "$build_lock"
}
