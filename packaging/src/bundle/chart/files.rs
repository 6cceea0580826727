//! The chart's files besides the templates of the plan's objects and the values:
//! `templates/_helpers.tpl`, `templates/NOTES.txt`, `Chart.yaml` and the README.

use initializer_crds::{constants, yaml};
use serde_json::json;

use super::values::{Field, leaves};
use super::{APP_VERSION, CHART_NAME, GENERATED_HEADER, HELPER, json_error};
use crate::bundle::generate;
use crate::error::Error;
use crate::manifest;

/// `templates/_helpers.tpl`: the namespace, the labels and the image references.
pub fn helpers() -> String {
    format!(
        r#"{{{{/* {header} */}}}}

{{{{/* The operator's namespace: namespaceOverride, else the release namespace. */}}}}
{{{{- define "{HELPER}.namespace" -}}}}
{{{{- default .Release.Namespace .Values.namespaceOverride -}}}}
{{{{- end -}}}}

{{{{/* Labels on every object, besides the bundle's own. */}}}}
{{{{- define "{HELPER}.labels" -}}}}
helm.sh/chart: {{{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}}}
app.kubernetes.io/instance: {{{{ .Release.Name }}}}
app.kubernetes.io/version: {{{{ .Chart.AppVersion | quote }}}}
app.kubernetes.io/managed-by: {{{{ .Release.Service }}}}
{{{{- end -}}}}

{{{{/* An image's reference from its values: repository@digest when a digest is set, else
repository:tag, the tag defaulting to the chart's appVersion. Called with (list $image $). */}}}}
{{{{- define "{HELPER}.imageReference" -}}}}
{{{{- $image := index . 0 -}}}}
{{{{- if $image.digest -}}}}
{{{{- printf "%s@%s" $image.repository $image.digest -}}}}
{{{{- else -}}}}
{{{{- printf "%s:%s" $image.repository ($image.tag | default (index . 1).Chart.AppVersion) -}}}}
{{{{- end -}}}}
{{{{- end -}}}}

{{{{/* The operator's image. */}}}}
{{{{- define "{HELPER}.image" -}}}}
{{{{- include "{HELPER}.imageReference" (list .Values.image .) -}}}}
{{{{- end -}}}}

{{{{/* The preset initializer's image. */}}}}
{{{{- define "{HELPER}.presetImage" -}}}}
{{{{- include "{HELPER}.imageReference" (list .Values.presetImage .) -}}}}
{{{{- end -}}}}
"#,
        header = GENERATED_HEADER.trim_start_matches("# ")
    )
}

/// `templates/NOTES.txt`: what to do after `helm install`.
pub fn notes() -> String {
    let name = manifest::OPERATOR_NAME;
    let workloads = crate::rbac::WORKLOADS_CLUSTER_ROLE;
    let label = constants::WORKLOADS_LABEL;
    format!(
        r#"{name} {{{{ .Chart.AppVersion }}}} is installed in namespace {{{{ include "{HELPER}.namespace" . }}}}.

Wait until it is available:
  kubectl -n {{{{ include "{HELPER}.namespace" . }}}} rollout status deployment/{name}

Create an Initializer and watch it register:
  kubectl apply -f {repo}/raw/main/examples/sidecar-initializer.yaml
  kubectl get initializers -w

Initializers' workloads run in this namespace, or in a namespace an administrator allows:
  kubectl label namespace NS {label}=true
  kubectl -n NS create rolebinding {workloads} \
    --clusterrole={workloads} \
    --serviceaccount={{{{ include "{HELPER}.namespace" . }}}}:{name}

Before `helm uninstall`, delete (or suspend) every Initializer while the operator still runs, so
it removes their webhook configurations. Helm keeps the CRD; delete it yourself when you mean to.
"#,
        repo = generate::REPOSITORY,
    )
}

/// `Chart.yaml`: the chart's version and appVersion (both the operator's), the Kubernetes
/// versions it installs on, and where it comes from.
pub fn chart_yaml() -> Result<String, Error> {
    let yaml = yaml::to_string(&chart_metadata())
        .map_err(|err| Error::ChartGenerate(format!("failed to serialize Chart.yaml: {err}")))?;
    Ok(format!("{GENERATED_HEADER}\n{yaml}"))
}

/// What [`chart_yaml`] writes.
pub(super) fn chart_metadata() -> serde_json::Value {
    let repository = generate::REPOSITORY;
    json!({
        "apiVersion": "v2",
        "name": CHART_NAME,
        "description": manifest::OPERATOR_DESCRIPTION,
        "type": "application",
        "version": APP_VERSION,
        "appVersion": APP_VERSION,
        "kubeVersion": format!(">={}-0", generate::MIN_KUBE_VERSION),
        "home": repository,
        "sources": [repository],
        "icon": format!("{repository}/raw/main/packaging/src/bundle/assets/icon.svg"),
        "keywords": ["admission", "initializer", "webhook", "mutating", "sidecar", "injection"],
        "maintainers": [{"name": "initializer-dev maintainers", "email": "maintainers@initializer.dev"}],
    })
}

/// The chart's `README.md`: how to install it and every value.
pub fn readme(fields: &[Field]) -> Result<String, Error> {
    let mut rows = String::new();
    for (path, default, doc) in leaves(fields) {
        let default =
            serde_json::to_string(&default).map_err(|err| json_error("a default", &err))?;
        rows.push_str(&format!("| `{path}` | `{default}` | {doc} |\n"));
    }
    Ok(format!(
        r#"<!-- {header} -->
# {CHART_NAME}

{description}

This chart is generated from the OLM bundle (`bundles/{CHART_NAME}`): the same Deployment,
ServiceAccount, RBAC (the CSV's `permissions` and `clusterPermissions`), PodDisruptionBudget,
workloads ClusterRole and CRD, with values for what differs between clusters. Regenerate it with
`make bundle`; never edit it by hand.

```sh
helm install {CHART_NAME} charts/{CHART_NAME} -n {namespace} --create-namespace
kubectl -n {namespace} rollout status deployment/{name}
```

One release per cluster: the CRD, the ClusterRoles and the webhook configurations the operator
manages are cluster-wide, so the objects keep the bundle's names. The CRD is a template, not a
file of `crds/`: Helm creates or upgrades it only once the pre-install and pre-upgrade hook (the
Job `{hook}`, in the operator's image) has put the guard on Initializers in force, so that no
Initializer is created unguarded; `helm uninstall` leaves it, and every Initializer with it
(`helm.sh/resource-policy: keep`). Before `helm uninstall`, delete (or suspend) every
Initializer while the operator still runs, so that it removes their webhook configurations.

## Values

`values.schema.json` checks every value; `helm install` and `helm template` refuse a wrong one
and name it.

| Value | Default | Description |
|---|---|---|
{rows}"#,
        header = GENERATED_HEADER.trim_start_matches("# "),
        description = manifest::OPERATOR_DESCRIPTION,
        namespace = manifest::DEFAULT_NAMESPACE,
        name = manifest::OPERATOR_NAME,
        hook = super::GUARD_HOOK_NAME,
    ))
}
