#!/usr/bin/env bash
# The container engine for `make e2e-kind` on a machine where none is running:
#
#   e2e/kind/offline/engine.sh start   # start dockerd unless an engine already answers
#   e2e/kind/offline/engine.sh stop    # stop the dockerd this script started, nothing else
#
# An engine that already answers `docker info` is used as it is and never stopped. Otherwise
# dockerd (Debian's docker.io) is started as root, its log and pid under target/kind. On a
# machine whose capability bounding set lacks CAP_SYS_RESOURCE (a quirk of some VMs), its
# default runtime is runc-without-sys-resource, said so on stderr; elsewhere it is plain runc.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${KIND_STATE_DIR:-$here/../../../target/kind}"
pidfile="$state/dockerd.pid"
docker="${DOCKER:-docker}"
# shellcheck source-path=SCRIPTDIR
source "$here/host.sh"

log() { echo "engine: $*" >&2; }

start() {
  if "$docker" info >/dev/null 2>&1; then
    return 0
  fi
  command -v dockerd >/dev/null || {
    log "no container engine answers and dockerd is not installed (apt-get install docker.io)"
    exit 1
  }
  [[ "$(id -u)" == 0 ]] || { log "no container engine answers; starting dockerd needs root"; exit 1; }
  mkdir -p "$state"
  local args=(--pidfile "$pidfile")
  if lacks_sys_resource; then
    log "this machine's capability bounding set lacks CAP_SYS_RESOURCE: privileged containers run through $here/runc-without-sys-resource"
    args+=(--add-runtime "without-sys-resource=$here/runc-without-sys-resource"
           --default-runtime without-sys-resource)
  fi
  log "starting dockerd (log: $state/dockerd.log)"
  # A session of its own: a signal to the caller's process group (Ctrl-C, `timeout`) reaches
  # the recipe, whose teardown deletes its cluster through this engine before stopping it.
  setsid dockerd "${args[@]}" >"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if "$docker" info >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  log "dockerd did not answer within 30 s; the end of its log:"
  tail -n 20 "$state/dockerd.log" >&2
  exit 1
}

stop() {
  [[ -f "$pidfile" ]] || return 0
  local pid
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping dockerd ($pid)"
    kill "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
