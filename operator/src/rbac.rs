//! The least ClusterRole the operator needs, as `PolicyRule`s (the bundle generator turns them
//! into the ClusterServiceVersion's `clusterPermissions`), and the list of every API call the
//! operator makes, which a test checks the rules against.

use k8s_openapi::api::rbac::v1::PolicyRule;

/// One API call the operator makes: (API group, resource, verb).
pub type ApiCall = (&'static str, &'static str, &'static str);

/// Every API call the operator makes, with where it is made. Keep in step with the code: a new
/// call goes here first, and the test below then demands a rule for it.
pub const API_CALLS: &[ApiCall] = &[
    // controller: the Controller's reflector, the finalizer helper, status apply.
    ("initializer.dev", "initializers", "get"),
    ("initializer.dev", "initializers", "list"),
    ("initializer.dev", "initializers", "watch"),
    ("initializer.dev", "initializers", "patch"),
    ("initializer.dev", "initializers/status", "patch"),
    // apply::apply_workload (server-side apply creates when missing) and the owned watches.
    ("apps", "deployments", "get"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "watch"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("", "services", "create"),
    ("", "services", "patch"),
    ("", "configmaps", "list"),
    ("", "configmaps", "watch"),
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "secrets", "watch"),
    ("", "secrets", "create"),
    ("", "secrets", "patch"),
    ("policy", "poddisruptionbudgets", "list"),
    ("policy", "poddisruptionbudgets", "watch"),
    ("policy", "poddisruptionbudgets", "create"),
    ("policy", "poddisruptionbudgets", "patch"),
    // apply::WebhookRegistrar and controller::remove_orphans.
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "list",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "watch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "delete",
    ),
    // apply::apply_fallback / check_fallback (server-side apply, also dry run) and
    // apply::remove_fallback: the fallback policy and its binding.
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "delete",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "delete",
    ),
    // controller::remove_orphans: fallbacks left by an Initializer that is gone.
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "list",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "list",
    ),
    // missed::count: namespaces' labels for the namespace selector (metadata only).
    ("", "namespaces", "list"),
    // supervisor: the EndpointSlice watch (the probe dials the ready endpoints it lists
    // directly, not through the API server).
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    // events::Recorder (creates, then patches a series).
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    // leader: the Lease.
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..Default::default()
    }
}

/// The operator's ClusterRole rules.
pub fn cluster_rules() -> Vec<PolicyRule> {
    vec![
        // get/list/watch: the Controller's cache; patch: the finalizer (JSON patch).
        rule(
            &["initializer.dev"],
            &["initializers"],
            &["get", "list", "watch", "patch"],
        ),
        // patch: status is written by server-side apply on the status subresource.
        rule(
            &["initializer.dev"],
            &["initializers/status"],
            &["get", "patch"],
        ),
        // get: observe availability; list/watch: owned-object watch; create/patch: server-side
        // apply (which creates when missing). No delete: garbage collection follows owners.
        rule(
            &["apps"],
            &["deployments"],
            &["get", "list", "watch", "create", "patch"],
        ),
        // Same for the workload's Service, ConfigMap and TLS/CA Secrets (get: read the
        // existing certificates before deciding on rotation).
        rule(
            &[""],
            &["services", "configmaps", "secrets"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets"],
            &["get", "list", "watch", "create", "patch"],
        ),
        // Registration: create/patch to register, delete to deregister (fail open), get to
        // confirm deletion, list/watch to find orphans.
        rule(
            &["admissionregistration.k8s.io"],
            &["mutatingwebhookconfigurations"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // The fallback: server-side apply creates (and, as a dry run, compiles) the policy and
        // its binding while the initializer is out of the path; delete lifts them, and list
        // finds those an Initializer left behind. The guard on Initializers (guard.rs) is
        // applied the same way at startup.
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ],
            &["list", "create", "patch", "delete"],
        ),
        // list: namespaces' labels, to count missed initializations in the namespaces the
        // webhook selects.
        rule(&[""], &["namespaces"], &["list"]),
        // list/watch: the fast path (zero ready endpoints deregisters at once) and the
        // endpoints the probe dials.
        rule(
            &["discovery.k8s.io"],
            &["endpointslices"],
            &["get", "list", "watch"],
        ),
        // create/patch: Events through kube's Recorder (patch updates a series).
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
        // Leader election on one Lease.
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "update"],
        ),
    ]
}

/// True when `rules` allow `verb` on `resource` in `group`.
pub fn allows(rules: &[PolicyRule], (group, resource, verb): ApiCall) -> bool {
    rules.iter().any(|r| {
        let has = |list: &Option<Vec<String>>, item: &str| {
            list.iter().flatten().any(|x| x == item || x == "*")
        };
        has(&r.api_groups, group)
            && has(&r.resources, resource)
            && r.verbs.iter().any(|v| v == verb || v == "*")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_role_covers_every_api_call_the_operator_makes() {
        let rules = cluster_rules();
        let missing: Vec<_> = API_CALLS.iter().filter(|c| !allows(&rules, **c)).collect();
        assert!(missing.is_empty(), "not allowed: {missing:?}");
    }

    #[test]
    fn the_operator_cannot_reach_services_through_the_api_server() {
        // The probe dials endpoints directly: the service proxy would let the operator send
        // any request to any Service in the cluster.
        let rules = cluster_rules();
        for verb in ["get", "create"] {
            assert!(!allows(&rules, ("", "services/proxy", verb)));
        }
        assert!(
            !API_CALLS
                .iter()
                .any(|(_, resource, _)| *resource == "services/proxy")
        );
    }

    #[test]
    fn the_cluster_role_uses_no_wildcards_and_never_deletes_workloads() {
        let rules = cluster_rules();
        for r in &rules {
            for list in [&r.api_groups, &r.resources] {
                assert!(!list.iter().flatten().any(|x| x == "*"), "{r:?}");
            }
            assert!(!r.verbs.iter().any(|v| v == "*"));
        }
        assert!(!allows(&rules, ("apps", "deployments", "delete")));
        assert!(!allows(&rules, ("", "secrets", "delete")));
        assert!(allows(
            &rules,
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "delete"
            )
        ));
    }
}
