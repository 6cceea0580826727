# shellcheck shell=bash
# A shared turn of the e2e suites' lock, for scripts (sourced, not run): the flock protocol of
# e2e/src/sharing.rs on <target>/e2e.turnstile and <target>/e2e.lock. Work that loads the machine
# beside the suites holds one, so that a scenario that must have the machine to itself waits
# until it is done; the scenarios that share it run on meanwhile.

# take_shared_turn ROOT WHO: waits (saying so, as WHO) for a shared turn of the lock in the
# suites' target directory ($CARGO_TARGET_DIR, relative to the repository ROOT, else
# ROOT/target), held on fd 8 until release_turn or the end of the process and every child that
# inherited it.
take_shared_turn() {
  local dir="${CARGO_TARGET_DIR:-$1/target}"
  case "$dir" in /*) ;; *) dir="$1/$dir" ;; esac
  mkdir -p "$dir"
  exec 7>"$dir/e2e.turnstile" 8>"$dir/e2e.lock"
  if ! flock -n 7; then
    echo "$2: waiting for the turnstile (another run of the suites waits to have the machine to itself)" >&2
    flock 7
  fi
  if ! flock -n -s 8; then
    echo "$2: waiting for a shared turn (another run of the suites has the machine to itself)" >&2
    flock -s 8
  fi
  flock -u 7
  exec 7>&-
}

release_turn() {
  flock -u 8 2>/dev/null || true
  exec 8>&-
}
