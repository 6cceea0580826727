//! The guard on Initializers, as objects: the ValidatingAdmissionPolicy and binding that refuse
//! creating an Initializer, changing its spec, status or break-glass annotation, or deleting it,
//! unless the requester may create MutatingWebhookConfigurations (the power an Initializer hands
//! out). Pure builders, shared by everything that puts the guard in force: the installer and the
//! Helm chart apply it before the CRD exists, and the operator applies it again at startup and
//! keeps it in place (a registry+v1 bundle cannot carry a policy, so under OLM the operator is
//! the only one).

use std::collections::BTreeMap;

use initializer_crds::constants::{
    BREAK_GLASS_ANNOTATION, FINALIZER, GROUP, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PLURAL,
};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::manifest::GUARD_NAME;

/// How long after its binding's `creationTimestamp` (whole seconds, rounded down) the guard is
/// taken to be in force: at least one full second after the binding was stored, time for the
/// API server to load a new policy. The operator treats an Initializer created sooner as
/// unguarded, so the installer and the chart's pre-install hook (`initializer-operator guard`)
/// let the CRD be created only this long after a new binding.
pub const IN_FORCE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// What the installer and the operator log where the API server does not serve the guard's API.
pub const NOT_SERVED_WARNING: &str = "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30 or later): Initializers are guarded by RBAC alone";

/// The check every create, and every update that changes the spec, of an Initializer must pass.
pub const GUARD_EXPRESSION: &str = "authorizer.group('admissionregistration.k8s.io').resource('mutatingwebhookconfigurations').check('create').allowed()";

/// What a refused requester reads.
pub const GUARD_MESSAGE: &str = "an Initializer is cluster-admin power (it intercepts and may change every object it matches): creating one, changing its spec or status, setting, changing or removing its break-glass annotation, removing the operator's finalizer, or deleting it needs the right to create mutatingwebhookconfigurations";

/// Which requests need the check: creates, deletes, status writes, spec changes, any change to
/// the break-glass annotation ([`BREAK_GLASS_ANNOTATION`]: setting it takes the Initializer out
/// of the path, removing it puts it back), and the removal of the operator's [`FINALIZER`] (a
/// deletion without it skips the cleanup that takes what the operator made out of force). Other
/// metadata-only updates of the main resource (the garbage collector's own finalizers, labels)
/// hand out no power. (`request.subResource` is absent, not empty, on the main resource: hence
/// `has`.) The annotation's presence and its value are compared apart: no value stands for
/// "absent".
pub fn match_expression() -> String {
    let present = |o: &str| {
        format!(
            "(has({o}.metadata.annotations) && '{BREAK_GLASS_ANNOTATION}' in {o}.metadata.annotations)"
        )
    };
    let value = |o: &str| format!("{o}.metadata.annotations['{BREAK_GLASS_ANNOTATION}']");
    let finalized = |o: &str| {
        format!("(has({o}.metadata.finalizers) && '{FINALIZER}' in {o}.metadata.finalizers)")
    };
    let (new, old) = (present("object"), present("oldObject"));
    format!(
        "request.operation != 'UPDATE' || (has(request.subResource) && request.subResource == 'status') \
         || object.spec != oldObject.spec || {new} != {old} || ({new} && {old} && {} != {}) \
         || ({} && !{})",
        value("object"),
        value("oldObject"),
        finalized("oldObject"),
        finalized("object"),
    )
}

/// The metadata of a policy or binding of the operator's own: `name`, with the operator's label.
pub(crate) fn operator_metadata(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(BTreeMap::from([(
            MANAGED_BY_LABEL.to_string(),
            MANAGED_BY_VALUE.to_string(),
        )])),
        ..Default::default()
    }
}

/// A binding named as its policy `name`, with the operator's label: the policy, everywhere,
/// denying.
pub(crate) fn denying_binding(name: &str) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: operator_metadata(name),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: name.to_string(),
            validation_actions: vec!["Deny".to_string()],
            ..Default::default()
        },
    }
}

/// The policy: CREATE, UPDATE and DELETE of `initializers.initializer.dev` and its status are
/// refused (fail closed) unless the requester may create MutatingWebhookConfigurations.
pub fn policy() -> ValidatingAdmissionPolicy {
    ValidatingAdmissionPolicy {
        metadata: operator_metadata(GUARD_NAME),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(writes_to(
                GROUP,
                vec![PLURAL.to_string(), format!("{PLURAL}/status")],
            )),
            match_conditions: Some(vec![MatchCondition {
                name: "creates-deletes-or-changes-spec-or-status".to_string(),
                expression: match_expression(),
            }]),
            validations: Some(vec![Validation {
                expression: GUARD_EXPRESSION.to_string(),
                message: Some(GUARD_MESSAGE.to_string()),
                reason: Some("Forbidden".to_string()),
                message_expression: None,
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The annotation on the binding listing the UIDs of the bindings it replaced while the operator
/// watched (the newest last, a few at most): what was proven under one of those and has not
/// changed since stays proven. A binding created by anyone else starts without it.
pub const EARLIER_BINDINGS_ANNOTATION: &str = "initializer.dev/earlier-bindings";

/// How many earlier bindings the annotation keeps.
pub const EARLIER_BINDINGS_KEPT: usize = 8;

/// The binding: the policy, everywhere, denying.
pub fn binding() -> ValidatingAdmissionPolicyBinding {
    denying_binding(GUARD_NAME)
}

/// Every create, update and delete of `resources` in `group`, in any version and scope: what
/// the guard and the operator's bounds match.
pub(crate) fn writes_to(group: &str, resources: Vec<String>) -> MatchResources {
    MatchResources {
        resource_rules: Some(vec![NamedRuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec!["*".to_string()]),
            resources: Some(resources),
            operations: Some(["CREATE", "UPDATE", "DELETE"].map(String::from).to_vec()),
            scope: Some("*".to_string()),
            resource_names: None,
        }]),
        ..Default::default()
    }
}
