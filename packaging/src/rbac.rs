//! The operator's rights, least privilege, as `PolicyRule`s, and the list of every API call the
//! operator makes, which a test keeps equal to the rules.
//!
//! - [`cluster_rules`] (the CSV's `clusterPermissions`, a ClusterRole): only what must be
//!   cluster-wide: Initializers, webhook configurations, admission policies, reading
//!   namespaces, Events.
//! - [`namespace_rules`] (the CSV's `permissions`, a Role in the operator's namespace): the
//!   workload objects, EndpointSlices and the leader-election Lease.
//! - [`workload_rules`] (the ClusterRole [`WORKLOADS_CLUSTER_ROLE`] shipped in the bundle): the
//!   Role's rules without the Lease, for an administrator to bind with a RoleBinding in each
//!   namespace labelled for workloads.
//! - [`policy_canary_rules`] (the ClusterRole [`POLICY_CANARY_CLUSTER_ROLE`] shipped in the
//!   bundle): the dry-run creates of the proof's corpus, for an administrator to bind with a
//!   RoleBinding in the policy canary namespace.
//! - [`legacy_rules`] and [`legacy_canary_rules`] (the ClusterRoles [`LEGACY_CLUSTER_ROLE`] and
//!   [`LEGACY_CANARY_CLUSTER_ROLE`] shipped in the bundle): what `backend:
//!   InitializerConfiguration` needs, granted only when an administrator binds them (the first
//!   with a ClusterRoleBinding, the second with a RoleBinding in the operator's namespace, where canaries are
//!   made). Why each right exists:
//!   - `initializerconfigurations` get/list/create/patch/delete: register (server-side apply)
//!     and deregister the configuration, confirm it is gone before the finalizer goes, and find
//!     the orphans an Initializer removed without its finalizer left behind.
//!   - `clusterroles` and `clusterrolebindings` get/create/patch: the initializer's controller
//!     watches and updates what it initializes in every namespace, which only a ClusterRole can
//!     grant (owned by the Initializer, so garbage collection deletes them: no delete).
//!   - every resource: get/list/watch/update/`initialize`. The operator releases every object
//!     still pending on a dead initializer's name, and clears the name from the initializer's own
//!     ReplicaSets and pods: list with `includeUninitialized`, then update, which the era's
//!     `Initializers` admission plugin allows on an uninitialized object only with `initialize`.
//!     The same plugin checks `initialize` for a create that sets `metadata.initializers`: the
//!     workload objects the operator creates with `pending: []` and the canaries, which this
//!     cluster-wide grant covers too. The rules can name any resource, so these cannot be
//!     narrower; and RBAC lets the operator grant the controller's ClusterRole only rights it
//!     holds itself (no `escalate`/`bind`).
//!   - every resource in the operator's namespace: create/delete, the canary of the end-to-end probe (a kind
//!     the rules reach, created with `includeUninitialized` pending on this initializer alone,
//!     deleted after).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The ClusterRole an administrator binds in a labelled namespace so that the operator may run
/// workloads there (shipped in the bundle, applied by `install`).
pub const WORKLOADS_CLUSTER_ROLE: &str = "initializer-operator-workloads";

/// The ClusterRole an administrator binds (ClusterRoleBinding to the operator's ServiceAccount)
/// to allow `backend: InitializerConfiguration` ([`legacy_rules`]).
pub const LEGACY_CLUSTER_ROLE: &str = "initializer-operator-legacy-initializers";
/// The ClusterRole an administrator binds in the operator's namespace (RoleBinding to the operator's
/// ServiceAccount) so that the legacy backend's probe may create its canaries there
/// ([`legacy_canary_rules`]).
pub const LEGACY_CANARY_CLUSTER_ROLE: &str = "initializer-operator-legacy-canary";

/// The ClusterRole an administrator binds (RoleBinding to the operator's ServiceAccount) in the
/// namespace named by `--policy-canary-namespace`, where a preset's policy is proven against
/// its webhook ([`policy_canary_rules`]; shipped in the bundle).
pub const POLICY_CANARY_CLUSTER_ROLE: &str = "initializer-operator-policy-canary";

/// One API call the operator makes: (API group, resource, verb).
pub type ApiCall = (&'static str, &'static str, &'static str);

/// Every cluster-wide API call the operator makes, with where it is made. Keep in step with the
/// code: a new call goes here first, and the tests below then demand a rule for it (and refuse
/// a rule no call needs).
pub const CLUSTER_CALLS: &[ApiCall] = &[
    // controller: the Controller's reflector, the finalizer helper, status apply.
    ("initializer.dev", "initializers", "get"),
    ("initializer.dev", "initializers", "list"),
    ("initializer.dev", "initializers", "watch"),
    ("initializer.dev", "initializers", "patch"),
    ("initializer.dev", "initializers/status", "patch"),
    // apply::apply_claimed: every workload object carries a controller owner reference with
    // blockOwnerDeletion to its Initializer, which OwnerReferencesPermissionEnforcement (on in
    // OpenShift) allows only to whoever may update the Initializer's finalizers.
    ("initializer.dev", "initializers/finalizers", "update"),
    // backend::Configurations (apply::WebhookRegistrar), controller::remove_orphans, and
    // controller::run, which watches them.
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
    // apply::apply_fallback / check_fallback (server-side apply, also dry run),
    // apply::remove_fallback, guard::apply (at startup), and controller::remove_orphans
    // (list: fallbacks left by an Initializer that is gone), and apply::claim_fallback /
    // remove_fallback_object (get: is the live one ours?).
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "list",
    ),
    // guard::keep_restoring (the guard put back as soon as it is deleted or edited).
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "watch",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "watch",
    ),
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
        "list",
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
    // bounds::put_in_place (at startup): which account the operator runs as, to bound it
    // (what `system:basic-user` grants every account, granted here so the operator's rights
    // stand on their own). Its policy and binding are created and read with the rights above.
    ("authentication.k8s.io", "selfsubjectreviews", "create"),
    // controller::check_workload_namespace (is it labelled for workloads?) and missed::count
    // (namespaces' labels for the namespace selector).
    ("", "namespaces", "get"),
    ("", "namespaces", "list"),
    // events::Recorder (creates, then patches a series), in the namespace `default`, since
    // Initializers are cluster-scoped.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    // apply::network_policy::read_api_server_ranges and api_server_range_changes
    // (`--network-policy=auto`): the API server's addresses, from the EndpointSlice
    // `kubernetes` in `default` (only that name), read at each reconcile and watched by it.
    ("discovery.k8s.io", "endpointslices", "get"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    // The engine (operator/src/engine/proof.rs): a preset's MutatingAdmissionPolicy and its
    // binding applied (server-side apply: patch), read to tell ours and to check for drift
    // (get), dry-run created under another name for the drift check (create), removed once
    // the webhook is back (delete), and watched by controller::run (list, watch) so that an
    // edit or deletion is put right at once.
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "list",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "watch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "list",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "watch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicies",
        "delete",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
        "delete",
    ),
];

/// Every API call the operator makes in a namespace where workloads run (its own, and each
/// labelled one), with where it is made.
pub const WORKLOAD_CALLS: &[ApiCall] = &[
    // apply::claim (get), apply::apply_claimed (server-side apply creates when missing), the
    // Controller's owned-object watches in the operator's namespace (list, watch).
    ("apps", "deployments", "get"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "watch"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("", "services", "get"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("", "services", "create"),
    ("", "services", "patch"),
    ("", "configmaps", "get"),
    ("", "configmaps", "list"),
    ("", "configmaps", "watch"),
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "serviceaccounts", "get"),
    ("", "serviceaccounts", "list"),
    ("", "serviceaccounts", "watch"),
    ("", "serviceaccounts", "create"),
    ("", "serviceaccounts", "patch"),
    // Secrets: also apply::read_tls (get), and apply::remove_stale_ca (delete: the CA an
    // earlier version kept in the workload namespace, only ours).
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "secrets", "watch"),
    ("", "secrets", "create"),
    ("", "secrets", "patch"),
    ("", "secrets", "delete"),
    ("policy", "poddisruptionbudgets", "get"),
    ("policy", "poddisruptionbudgets", "list"),
    ("policy", "poddisruptionbudgets", "watch"),
    ("policy", "poddisruptionbudgets", "create"),
    ("policy", "poddisruptionbudgets", "patch"),
    // apply::network_policy (`--network-policy=on` or `auto`): claim, apply, the owned-object
    // watch; delete: the policy written before, once none is wanted (the setting off, or the
    // policy withdrawn; only ours, by UID).
    ("networking.k8s.io", "networkpolicies", "get"),
    ("networking.k8s.io", "networkpolicies", "list"),
    ("networking.k8s.io", "networkpolicies", "watch"),
    ("networking.k8s.io", "networkpolicies", "create"),
    ("networking.k8s.io", "networkpolicies", "patch"),
    ("networking.k8s.io", "networkpolicies", "delete"),
    // supervisor: the EndpointSlice watch in the workload namespace (the probe dials the
    // ready endpoints it lists directly, not through the API server).
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
];

/// Every cluster-wide API call of the `InitializerConfiguration` backend, with where it is
/// made (`*` stands for every group and every resource the rules may reach).
pub const LEGACY_CALLS: &[ApiCall] = &[
    // backend::Configurations (apply::legacy::InitializerConfigurationRegistrar: get,
    // server-side apply, delete), from the supervisor and controller::remove_configuration and
    // cleanup; list: the orphan sweep (controller::remove_orphans).
    (
        "admissionregistration.k8s.io",
        "initializerconfigurations",
        "get",
    ),
    (
        "admissionregistration.k8s.io",
        "initializerconfigurations",
        "list",
    ),
    (
        "admissionregistration.k8s.io",
        "initializerconfigurations",
        "create",
    ),
    (
        "admissionregistration.k8s.io",
        "initializerconfigurations",
        "patch",
    ),
    (
        "admissionregistration.k8s.io",
        "initializerconfigurations",
        "delete",
    ),
    // apply::legacy::apply_rbac: claim (get), server-side apply (create, patch).
    ("rbac.authorization.k8s.io", "clusterroles", "get"),
    ("rbac.authorization.k8s.io", "clusterroles", "create"),
    ("rbac.authorization.k8s.io", "clusterroles", "patch"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "get"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "patch"),
    // apply::legacy::release and clear_own (list with includeUninitialized, get after a
    // conflict, update with initialize), canary_probe (get); watch, because the controller's
    // ClusterRole grants it and RBAC lets the operator grant only what it holds.
    ("*", "*", "get"),
    ("*", "*", "list"),
    ("*", "*", "watch"),
    ("*", "*", "update"),
    ("*", "*", "initialize"),
];

/// The legacy backend's calls in the operator's namespace, where the canaries are made.
pub const LEGACY_CANARY_CALLS: &[ApiCall] = &[
    // apply::legacy::canary_probe.
    ("*", "*", "create"),
    ("*", "*", "delete"),
];

/// The engine's calls in the policy canary namespace: the proof's corpus created through both
/// engines, always as a server-side dry run (operator/src/engine/proof.rs). RBAC knows no
/// dry-run verb, so these are `create`; nothing is ever stored.
pub const POLICY_CANARY_CALLS: &[ApiCall] = &[
    ("", "pods", "create"),
    ("apps", "deployments", "create"),
    ("apps", "statefulsets", "create"),
    ("apps", "daemonsets", "create"),
    ("apps", "replicasets", "create"),
    ("batch", "jobs", "create"),
    ("batch", "cronjobs", "create"),
];

/// The API calls the operator makes only in its own namespace: leader election on one Lease.
pub const OPERATOR_NAMESPACE_CALLS: &[ApiCall] = &[
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

/// The operator's ClusterRole rules: only what must be cluster-wide.
pub fn cluster_rules() -> Vec<PolicyRule> {
    vec![
        // get/list/watch: the Controller's cache; patch: the finalizer (JSON patch).
        rule(
            &["initializer.dev"],
            &["initializers"],
            &["get", "list", "watch", "patch"],
        ),
        // patch: status is written by server-side apply on the status subresource.
        rule(&["initializer.dev"], &["initializers/status"], &["patch"]),
        // update: owner references with blockOwnerDeletion on the workload objects, under
        // OwnerReferencesPermissionEnforcement (OpenShift).
        rule(
            &["initializer.dev"],
            &["initializers/finalizers"],
            &["update"],
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
        // applied the same way at startup, and watched so that it is put back at once; the
        // bounds on the operator's account (bounds.rs) are created once and read.
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // The engine: a preset's MutatingAdmissionPolicy and binding, applied (patch), read for
        // ownership and drift (get; create: the drift check's dry run), watched (list, watch),
        // removed (delete).
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // create: the operator's own user name, for the bounds on its account (bounds.rs).
        rule(
            &["authentication.k8s.io"],
            &["selfsubjectreviews"],
            &["create"],
        ),
        // get: is a workload namespace labelled for initializers; list: namespaces' labels, to
        // count missed initializations in the namespaces the webhook selects.
        rule(&[""], &["namespaces"], &["get", "list"]),
        // create/patch: Events through kube's Recorder (patch updates a series).
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
        // get, list, watch: the API server's addresses under `--network-policy=auto`, from the
        // EndpointSlice of the `kubernetes` Service, read at each reconcile and watched so that
        // every policy follows a change at once (a ClusterRole, since a CSV grants Roles only in
        // the operator's namespace; by name, so no other slice can be read: a list or watch is
        // authorized by name only with a `metadata.name` field selector).
        PolicyRule {
            resource_names: Some(vec![API_SERVER_ENDPOINT_SLICE.to_string()]),
            ..rule(
                &["discovery.k8s.io"],
                &["endpointslices"],
                &["get", "list", "watch"],
            )
        },
    ]
}

/// The one EndpointSlice the operator may read cluster-wide: the `kubernetes` Service's, which
/// lists the API server's addresses.
pub const API_SERVER_ENDPOINT_SLICE: &str = "kubernetes";

/// The rules for a namespace where workloads run: the workload objects (no delete but the
/// migrated CA's: garbage collection follows owners) and the EndpointSlices the probe reads.
pub fn workload_rules() -> Vec<PolicyRule> {
    vec![
        // get: claim (is it ours?); list/watch: the owned-object watches; create/patch:
        // server-side apply (which creates when missing).
        rule(
            &["apps"],
            &["deployments"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            &[""],
            &["services", "configmaps", "serviceaccounts"],
            &["get", "list", "watch", "create", "patch"],
        ),
        // The TLS and CA Secrets; delete: the CA an earlier version kept beside the workload,
        // once it is in the operator's namespace (only ours, by UID).
        rule(
            &[""],
            &["secrets"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets"],
            &["get", "list", "watch", "create", "patch"],
        ),
        // `--network-policy=on` or `auto`: the policy in front of the initializer's pods; delete:
        // the one written before, once none is wanted (the setting off, or the policy
        // withdrawn; only ours, by UID).
        rule(
            &["networking.k8s.io"],
            &["networkpolicies"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // list/watch: the fast path (zero ready endpoints deregisters at once) and the
        // endpoints the probe dials.
        rule(
            &["discovery.k8s.io"],
            &["endpointslices"],
            &["list", "watch"],
        ),
    ]
}

/// The rules of [`LEGACY_CLUSTER_ROLE`] (see the module documentation for why each exists).
pub fn legacy_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            &["admissionregistration.k8s.io"],
            &["initializerconfigurations"],
            &["get", "list", "create", "patch", "delete"],
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "clusterrolebindings"],
            &["get", "create", "patch"],
        ),
        rule(
            &["*"],
            &["*"],
            &["get", "list", "watch", "update", "initialize"],
        ),
    ]
}

/// The rules of [`POLICY_CANARY_CLUSTER_ROLE`]: dry-run creates of the pod kinds.
pub fn policy_canary_rules() -> Vec<PolicyRule> {
    vec![
        rule(&[""], &["pods"], &["create"]),
        rule(
            &["apps"],
            &["deployments", "statefulsets", "daemonsets", "replicasets"],
            &["create"],
        ),
        rule(&["batch"], &["jobs", "cronjobs"], &["create"]),
    ]
}

/// The rules of [`LEGACY_CANARY_CLUSTER_ROLE`]: create and delete canaries of any kind.
pub fn legacy_canary_rules() -> Vec<PolicyRule> {
    vec![rule(&["*"], &["*"], &["create", "delete"])]
}

/// The Role in the operator's namespace: [`workload_rules`] plus the leader-election Lease.
pub fn namespace_rules() -> Vec<PolicyRule> {
    let mut rules = workload_rules();
    rules.push(rule(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "create", "update"],
    ));
    rules
}

/// True when `rules` allow `verb` on every `resource` in `group` (a rule naming its objects does not).
pub fn allows(rules: &[PolicyRule], (group, resource, verb): ApiCall) -> bool {
    rules.iter().any(|r| {
        // A rule naming its objects does not allow the call on any other.
        if r.resource_names
            .as_ref()
            .is_some_and(|names| !names.is_empty())
        {
            return false;
        }
        let has = |list: &Option<Vec<String>>, item: &str| {
            list.iter().flatten().any(|x| x == item || x == "*")
        };
        has(&r.api_groups, group)
            && has(&r.resources, resource)
            && r.verbs.iter().any(|v| v == verb || v == "*")
    })
}

/// Every (group, resource, verb) the rules grant, sorted (rules without wildcards).
pub fn granted(rules: &[PolicyRule]) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = rules
        .iter()
        .flat_map(|r| {
            let groups = r.api_groups.clone().unwrap_or_default();
            let resources = r.resources.clone().unwrap_or_default();
            groups.into_iter().flat_map(move |g| {
                let verbs = r.verbs.clone();
                resources.clone().into_iter().flat_map(move |res| {
                    let g = g.clone();
                    verbs
                        .clone()
                        .into_iter()
                        .map(move |v| (g.clone(), res.clone(), v))
                })
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(lists: &[&[ApiCall]]) -> Vec<(String, String, String)> {
        let mut out: Vec<_> = lists
            .iter()
            .flat_map(|l| l.iter())
            .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn each_role_grants_exactly_the_calls_the_operator_makes_there() {
        assert_eq!(granted(&cluster_rules()), calls(&[CLUSTER_CALLS]));
        assert_eq!(granted(&workload_rules()), calls(&[WORKLOAD_CALLS]));
        assert_eq!(
            granted(&namespace_rules()),
            calls(&[WORKLOAD_CALLS, OPERATOR_NAMESPACE_CALLS])
        );
    }

    #[test]
    fn the_policy_canary_role_grants_only_the_proofs_creates() {
        assert_eq!(
            granted(&policy_canary_rules()),
            calls(&[POLICY_CANARY_CALLS])
        );
        assert!(!allows(&policy_canary_rules(), ("", "pods", "delete")));
        assert!(!allows(&policy_canary_rules(), ("", "secrets", "create")));
    }

    #[test]
    fn the_legacy_roles_grant_exactly_the_legacy_backends_calls() {
        assert_eq!(granted(&legacy_rules()), calls(&[LEGACY_CALLS]));
        assert_eq!(
            granted(&legacy_canary_rules()),
            calls(&[LEGACY_CANARY_CALLS])
        );
        // Nothing cluster-wide creates or deletes arbitrary objects: canaries only in the
        // namespace the canary role is bound in.
        assert!(!allows(&legacy_rules(), ("", "pods", "create")));
        assert!(!allows(&legacy_rules(), ("", "pods", "delete")));
        assert!(!allows(
            &legacy_rules(),
            ("rbac.authorization.k8s.io", "clusterroles", "escalate")
        ));
    }

    #[test]
    fn workload_objects_and_secrets_are_never_granted_cluster_wide() {
        let cluster = cluster_rules();
        for resource in [
            "secrets",
            "configmaps",
            "services",
            "serviceaccounts",
            "endpointslices",
        ] {
            for verb in ["get", "list", "watch", "create", "patch", "delete"] {
                for group in ["", "discovery.k8s.io"] {
                    assert!(
                        !allows(&cluster, (group, resource, verb)),
                        "{resource} {verb}"
                    );
                }
            }
        }
        let named: Vec<_> = cluster
            .iter()
            .filter(|r| r.resource_names.is_some())
            .collect();
        let [slice] = named.as_slice() else {
            panic!("one rule names its objects: {named:?}");
        };
        assert_eq!(
            (
                slice.resources.as_deref(),
                slice.verbs.as_slice(),
                slice.resource_names.as_deref()
            ),
            (
                Some(&["endpointslices".to_string()][..]),
                &["get".to_string(), "list".to_string(), "watch".to_string()][..],
                Some(&[API_SERVER_ENDPOINT_SLICE.to_string()][..])
            ),
            "only the API server's EndpointSlice, by name, read and watched"
        );
        for verb in ["get", "list", "create", "patch"] {
            assert!(!allows(&cluster, ("apps", "deployments", verb)));
            assert!(!allows(&cluster, ("policy", "poddisruptionbudgets", verb)));
            assert!(!allows(&cluster, ("coordination.k8s.io", "leases", verb)));
        }
    }

    #[test]
    fn the_workloads_cluster_role_is_the_role_without_the_lease() {
        let lease = ("coordination.k8s.io", "leases", "update");
        assert!(allows(&namespace_rules(), lease));
        assert!(!allows(&workload_rules(), lease));
        let mut role = granted(&namespace_rules());
        role.retain(|(_, resource, _)| resource != "leases");
        assert_eq!(role, granted(&workload_rules()));
    }

    #[test]
    fn the_operator_cannot_reach_services_through_the_api_server() {
        // The probe dials endpoints directly: the service proxy would let the operator send
        // any request to any Service in the cluster.
        for rules in [cluster_rules(), namespace_rules()] {
            for verb in ["get", "create"] {
                assert!(!allows(&rules, ("", "services/proxy", verb)));
            }
        }
    }

    #[test]
    fn no_rule_uses_wildcards_and_workloads_are_never_deleted() {
        let all: Vec<PolicyRule> = cluster_rules()
            .into_iter()
            .chain(namespace_rules())
            .collect();
        for r in &all {
            for list in [&r.api_groups, &r.resources] {
                assert!(!list.iter().flatten().any(|x| x == "*"), "{r:?}");
            }
            assert!(!r.verbs.iter().any(|v| v == "*"));
        }
        assert!(!allows(&all, ("apps", "deployments", "delete")));
        assert!(allows(
            &all,
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "delete"
            )
        ));
    }
}
