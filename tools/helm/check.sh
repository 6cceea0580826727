#!/usr/bin/env bash
# Checks the Helm chart with the real helm (built from helm.sh/helm/v4 by build.sh):
#
#   tools/helm/check.sh                  # lint, template, and every invalid values file refused
#   tools/helm/check.sh --server         # also: helm template | kubectl apply --server-side
#                                        # --dry-run=server against the cluster KUBECONFIG names
#
# - `helm lint --strict` (with the defaults and with every option) must be clean;
# - `helm template` must render with the defaults and with every option switched on;
# - each file in testdata/ is an invalid values file whose first line says `# expect: TEXT`:
#   `helm template -f FILE` must fail, and its error must contain TEXT (the field's name).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
chart="$(cd "$here/../.." && pwd)/charts/initializer-operator"
helm="$("$here/build.sh")"
namespace=initializer-system
monitoring=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PrometheusRule)
everything=(--set "logFormat=json,nodeSelector.disk=ssd,imagePullSecrets[0].name=regcred"
            --set "metrics.serviceMonitor.labels.release=prom,metrics.prometheusRule.labels.release=prom")
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

"$helm" lint --strict "$chart" >/dev/null || fail "helm lint --strict"
"$helm" lint --strict "$chart" "${everything[@]}" >/dev/null \
  || fail "helm lint --strict with every option"
"$helm" template initializer-operator "$chart" -n "$namespace" >/dev/null \
  || fail "helm template with the defaults"
"$helm" template initializer-operator "$chart" -n "$namespace" "${monitoring[@]}" "${everything[@]}" >/dev/null \
  || fail "helm template with the monitoring APIs and every option"

# The chart never carries the guard's objects, even where the API server serves the API: its
# pre-install hook's Job applies them (as objects of the chart, Helm would create them after the
# operator's Deployment and race its own apply, and as hook objects delete and re-create them).
guard=(--api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy
       --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding)
grep -qE '^kind: ValidatingAdmissionPolicy(Binding)?$' \
  <<<"$("$helm" template initializer-operator "$chart" -n "$namespace" "${guard[@]}")" \
  && fail "helm template renders the guard's objects, which the hook's Job applies"

for values in "$here"/testdata/*.yaml; do
  expect="$(sed -n '1s/^# expect: //p' "$values")"
  [[ -n "$expect" ]] || { fail "$values has no '# expect:' first line"; continue; }
  if output="$("$helm" template initializer-operator "$chart" -n "$namespace" -f "$values" 2>&1)"; then
    fail "$(basename "$values"): helm template accepted it"
  elif ! grep -qF -- "$expect" <<<"$output"; then
    fail "$(basename "$values"): the error does not name '$expect':"$'\n'"$output"
  fi
done

if [[ "${1:-}" == "--server" ]]; then
  command -v kubectl >/dev/null || { echo "kubectl is required for --server" >&2; exit 1; }
  # Into the existing namespace (`make cluster` has it); --force-conflicts because an install
  # from the bundle may own the same objects: the question is whether the API server accepts
  # every object as the chart renders it, CRD and hook included.
  if ! "$helm" template initializer-operator "$chart" -n "$namespace" "${guard[@]}" \
      | kubectl apply --server-side --dry-run=server --force-conflicts \
          --field-manager=helm-check -f - >/dev/null; then
    fail "helm template | kubectl apply --server-side --dry-run=server"
  fi
fi

if ((failures > 0)); then
  echo "$failures chart check(s) failed" >&2
  exit 1
fi
echo "chart $chart: lint, template and $(find "$here/testdata" -name '*.yaml' | wc -l) invalid values files checked${1:+ (and a server-side dry run)}"
