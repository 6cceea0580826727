//! What the `InitializerConfiguration` backend (`spec.backend: InitializerConfiguration`, the
//! original Initializers of Kubernetes 1.7–1.13) cannot honour, refused before anything is
//! deployed, and the name the initializer is pending as.
//!
//! The era's API server decides what is possible: an initializer only ever sees creates (an
//! object is uninitialized only between its create and the removal of its last pending name);
//! a configuration's rules have no operations, scope or subresources
//! (`admissionregistration/v1alpha1` `Rule`, k8s 1.7–1.13); pending names must be fully
//! qualified (`IsFullyQualifiedName` in `k8s.io/apimachinery/pkg/api/validation`, called by
//! `ValidateInitializers` on `metadata.initializers.pending[*].name`): a DNS-1123 subdomain of
//! at most 253 characters with at least three segments. ValidatingAdmissionPolicy (the
//! fallback) does not exist before 1.26, and there is no reinvocation.

use initializer_crds::constants::PENDING_NAME_DOMAIN;
use initializer_crds::{InitializerSpec, Operation, ReinvocationPolicy};

use super::Refusal;

/// Longest DNS-1123 subdomain, hence longest pending name.
pub const MAX_PENDING_NAME: usize = 253;

/// The name the Initializer `initializer` whose workload runs in `namespace` is pending as in
/// `metadata.initializers.pending`: `NAME.NS.initializer-operator.io`.
pub fn pending_name(initializer: &str, namespace: &str) -> String {
    format!("{initializer}.{namespace}.{PENDING_NAME_DOMAIN}")
}

/// Why `name` is not a fully qualified name as the era's API server checked one (`None` when
/// it is): its message for a name of fewer than three segments, and the DNS-1123 subdomain
/// messages otherwise.
pub fn fully_qualified_refusal(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Required value".into());
    }
    if name.len() > MAX_PENDING_NAME {
        return Some(format!(
            "must be no more than {MAX_PENDING_NAME} characters"
        ));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !name.split('.').all(label_ok) {
        return Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
                .into(),
        );
    }
    if name.split('.').count() < 3 {
        return Some("should be a domain with at least three segments separated by dots".into());
    }
    None
}

/// Every reason the legacy backend cannot run `spec` for the Initializer `initializer` in the
/// workload namespace `namespace` (empty when it can).
pub fn refusals(spec: &InitializerSpec, initializer: &str, namespace: &str) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let field = format!("spec.rules[{i}]");
        if rule.operations.iter().any(|op| *op != Operation::Create) {
            let named: Vec<&str> = rule.operations.iter().map(|op| op.as_str()).collect();
            refusals.push(Refusal::new(
                format!("{field}.operations"),
                format!(
                    "backend InitializerConfiguration initializes creates only, got {named:?}: an object is uninitialized only between its create and its initialization"
                ),
            ));
        }
        for resource in &rule.resources {
            if resource.contains('/') {
                refusals.push(Refusal::new(
                    format!("{field}.resources"),
                    format!(
                        "backend InitializerConfiguration initializes whole objects, not subresources, got {resource:?}"
                    ),
                ));
            } else if resource == "*" {
                refusals.push(Refusal::new(
                    format!("{field}.resources"),
                    "backend InitializerConfiguration needs the resources named: objects of a kind the initializer does not watch would stay pending"
                        .to_string(),
                ));
            }
        }
    }
    if spec.fallback.is_some() {
        refusals.push(Refusal::new(
            "spec.fallback",
            "backend InitializerConfiguration has no fallback: ValidatingAdmissionPolicy does not exist before Kubernetes 1.26, and InitializerConfiguration was removed in 1.14",
        ));
    }
    if spec.reinvocation_policy != ReinvocationPolicy::Never {
        refusals.push(Refusal::new(
            "spec.reinvocationPolicy",
            "backend InitializerConfiguration runs each initializer once per object: reinvocation needs the Webhook backend",
        ));
    }
    let name = pending_name(initializer, namespace);
    if let Some(why) = fully_qualified_refusal(&name) {
        refusals.push(Refusal::new(
            "metadata.name",
            format!("the pending name {name:?} is invalid: {why}"),
        ));
    }
    refusals
}

/// The refusal when the API server does not serve `admissionregistration.k8s.io/v1alpha1`
/// `initializerconfigurations` (removed in Kubernetes 1.14; before that, alpha and off unless
/// enabled): `None` when it does.
pub fn api_refusal(served: bool) -> Option<Refusal> {
    (!served).then(|| {
        Refusal::new(
            "spec.backend",
            "the API server does not serve admissionregistration.k8s.io/v1alpha1 initializerconfigurations (Kubernetes 1.7–1.13 with the Initializers admission plugin and the v1alpha1 API enabled): use backend Webhook",
        )
    })
}

/// The refusal when the rules reach no served, namespaced resource the operator can make a
/// canary of ([`crate::pending::canary_resource`]): without a canary the initializer could never
/// be probed end to end, hence never registered. `None` when there is one.
pub fn canary_refusal(has_canary: bool) -> Option<Refusal> {
    (!has_canary).then(|| {
        Refusal::new(
            "spec.rules",
            "backend InitializerConfiguration probes the initializer with a canary object, but the rules reach no served namespaced ConfigMap, Secret, Deployment, StatefulSet, ReplicaSet, DaemonSet, Job, CronJob, Service or Pod",
        )
    })
}
