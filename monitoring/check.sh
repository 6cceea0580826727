#!/usr/bin/env bash
# Checks monitoring/ with the tools its users run: promtool (Debian's prometheus package)
# checks the rules and runs the alert unit tests in tests/; the dashboard is decoded with
# Grafana's Foundation SDK (its dashboard schema) and every metric it or the rules query must
# be one the operator exports (a Rust test against the operator's metrics registry).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

# The Grafana Foundation SDK release whose schema the dashboard is checked against.
sdk_version='1769699998!10.1.0'

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool is missing: apt-get install -y prometheus" >&2
  exit 1
fi
cd "$here"
promtool check rules initializer-operator.rules.yaml
promtool test rules tests/*.yaml

venv="${MONITORING_VENV:-$root/target/monitoring-venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import grafana_foundation_sdk' >/dev/null 2>&1; then
  "$venv/bin/pip" install --quiet "grafana-foundation-sdk==$sdk_version"
fi
"$venv/bin/python" check_dashboard.py dashboard.json

# The packages and features the Makefile's WORKSPACE builds with: a build of one package resolves
# the features of that package alone, and would compile every crate under it again.
cd "$root"
workspace=(--features initializer-crds/generate)
cargo run -q "${workspace[@]}" --bin initializer-operator -- monitoring --check
cargo test -q --workspace "${workspace[@]}" --test monitoring_metrics
