# shellcheck shell=bash
# Stages of a long run (CI, `make check`, `make test`, `make e2e-kind`), sourced, not run: each
# prints when it starts and how long it took, and is recorded in $STAGE_LOG when that is set,
# so that the run can end with a table of them (stage_summary) and a slow stage is seen at once.
#
#   stage NAME COMMAND...   runs COMMAND (a program or a shell function) as the stage NAME
#   stage_failed STATUS     records the stages still open as failed; call it from an EXIT trap
#   stage_summary           the table of every stage $STAGE_LOG holds, with the share of the
#                           machine's CPU each used (low: it waited; near 100 %: it computed)
#
# Stages nest: a stage's command may run stages of its own (`make test` in CI's stage), and the
# exported STAGE_DEPTH tells them how deep they are. Under `set -e` a failing COMMAND ends the
# script at once, as it would without the stage: its stage is then recorded by stage_failed.

_stage_open=()

# The machine's busy and total CPU time so far (/proc/stat's first line, in clock ticks).
_stage_cpu() {
  local _ user nice system idle iowait rest
  read -r _ user nice system idle iowait rest </proc/stat 2>/dev/null || { echo "0 0"; return; }
  local busy=$((user + nice + system))
  for tick in $rest; do busy=$((busy + tick)); done
  echo "$busy $((busy + idle + iowait))"
}

# The share of the machine's CPU used since a _stage_cpu reading: low for a stage that waits
# (timeouts, the network), near 100 % for one that compiles.
_stage_busy() { # BUSY TOTAL
  local now
  read -r -a now <<<"$(_stage_cpu)"
  local total=$((now[1] - $2))
  if ((total > 0)); then echo "$(((now[0] - $1) * 100 / total)) %"; else echo "-"; fi
}

_stage_record() { # STARTED DEPTH NAME SECONDS RESULT CPU
  echo "<== [$(date -u +%H:%M:%S)] stage $3: $4 s, $5, CPU $6" >&2
  if [[ -n "${STAGE_LOG:-}" ]]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$STAGE_LOG"
  fi
}

stage() {
  local name="$1" depth="${STAGE_DEPTH:-0}" started cpu
  shift
  started="$(date +%s)" cpu="$(_stage_cpu)"
  echo "==> [$(date -u +%H:%M:%S)] stage $name" >&2
  _stage_open+=("$started"$'\t'"$depth"$'\t'"$name"$'\t'"$cpu")
  export STAGE_DEPTH=$((depth + 1))
  "$@"
  export STAGE_DEPTH="$depth"
  unset '_stage_open[-1]'
  # shellcheck disable=SC2086 # two numbers
  _stage_record "$started" "$depth" "$name" $(($(date +%s) - started)) ok "$(_stage_busy $cpu)"
}

stage_failed() {
  local status="$1" started depth name cpu i
  for ((i = ${#_stage_open[@]} - 1; i >= 0; i--)); do
    IFS=$'\t' read -r started depth name cpu <<<"${_stage_open[$i]}"
    # shellcheck disable=SC2086 # two numbers
    _stage_record "$started" "$depth" "$name" $(($(date +%s) - started)) "failed (exit $status)" \
      "$(_stage_busy $cpu)"
  done
  _stage_open=()
}

stage_summary() {
  [[ -n "${STAGE_LOG:-}" && -s "$STAGE_LOG" ]] || return 0
  local started depth name seconds result cpu
  printf '%-60s %8s %8s %6s  %s\n' "stage" "start" "seconds" "CPU" "result"
  # A stage is recorded when it ends, so nested stages come before their parent: order by start.
  sort -s -t $'\t' -k1,1n -k2,2n "$STAGE_LOG" | while IFS=$'\t' read -r started depth name seconds result cpu; do
    printf '%-60s %8s %8s %6s  %s\n' "$(printf '%*s' $((depth * 2)) '')$name" \
      "$(date -u -d "@$started" +%H:%M:%S)" "$seconds" "${cpu:--}" "$result"
  done
}
