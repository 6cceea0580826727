//! The guard on Initializers (a ValidatingAdmissionPolicy the operator applies at startup):
//! only those who may create webhook configurations may create or change Initializers (their
//! spec, status and break-glass annotation), the guard is put back when deleted, and an
//! Initializer created before it was in force is held until an administrator changes its spec.

use std::time::Duration;

use initializer_crds::constants::{
    BREAK_GLASS_ANNOTATION, FINALIZER, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use initializer_crds::{Initializer, Phase};
use initializer_test_support::wait_until as wait_for;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::support::{self, TestCluster};
use crate::{
    NS, configuration, create, guard, patch_spec, spawn, start, status_of, wait_for_event,
    wait_initializer, wait_registered,
};

on_backends! {
    /// The guard is a ValidatingAdmissionPolicy with the `authorizer` variable, in force where the
    /// API server serves it and authorizes; the sandbox does neither (sandbox/README.md).
    real only:
        only_those_who_may_create_webhook_configurations_may_create_initializers,
        an_initializer_created_before_the_guard_is_held_until_its_spec_changes,
        what_another_manager_adds_to_the_guard_is_taken_out,
}

/// Creates `initializer` as `user` (impersonated by the admin client).
async fn create_as(
    client: &Client,
    user: &str,
    initializer: &Initializer,
) -> Result<Initializer, kube::Error> {
    let request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers");
    let request = request
        .create(
            &PostParams::default(),
            serde_json::to_vec(initializer).unwrap(),
        )
        .unwrap();
    client.request::<Initializer>(as_user(user, request)).await
}

/// `request` made as `user` (impersonated by the admin client).
fn as_user(user: &str, mut request: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    request
        .headers_mut()
        .insert("Impersonate-User", user.parse().unwrap());
    request
}

/// A merge patch of `patch` onto the Initializer `by-admin`, as a request to make as someone.
fn merge_by_admin(patch: serde_json::Value) -> http::Request<Vec<u8>> {
    kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .patch("by-admin", &PatchParams::default(), &Patch::Merge(patch))
        .unwrap()
}

/// Makes `request` as alice, an editor of Initializers, and checks that the guard refuses her
/// `what`.
async fn refused_to_alice(client: &Client, what: &str, request: http::Request<Vec<u8>>) {
    use initializer_operator::guard::GUARD_MESSAGE;
    match client
        .request::<serde_json::Value>(as_user("alice", request))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{what}: {status:?}");
            assert!(status.message.contains(GUARD_MESSAGE), "{what}: {status:?}");
        }
        other => panic!("the editor's {what} went through: {other:?}"),
    }
}

/// Makes `user` an editor of Initializers (what OLM aggregates into `edit` and `admin`) who may
/// not create webhook configurations: RBAC lets them through, the guard alone refuses them.
async fn grant_initializer_editing(client: &Client, user: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let role = "initializer-editor";
    let params = PatchParams::apply("reconcile-test").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(
            role,
            &params,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [{
                    "apiGroups": ["initializer.dev"],
                    "resources": ["initializers", "initializers/status"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                }],
            })),
        )
        .await
        .unwrap();
    let binding = format!("{role}-{user}");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &binding,
            &params,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            })),
        )
        .await
        .unwrap();
}

async fn only_those_who_may_create_webhook_configurations_may_create_initializers(
    cluster: &TestCluster,
) {
    use initializer_operator::guard::{GUARD_MESSAGE, GUARD_NAME};
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };

    let (client, _operator) = start(cluster).await;
    // The operator applies the guard at startup, labelled as managed.
    wait_for(
        "the guard policy and binding",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            async move {
                let policy = Api::<ValidatingAdmissionPolicy>::all(c.clone())
                    .get_opt(GUARD_NAME)
                    .await
                    .unwrap();
                let binding = Api::<ValidatingAdmissionPolicyBinding>::all(c)
                    .get_opt(GUARD_NAME)
                    .await
                    .unwrap();
                policy.is_some_and(|p| p.labels()[MANAGED_BY_LABEL] == MANAGED_BY_VALUE)
                    && binding.is_some()
            }
        },
    )
    .await;

    grant_initializer_editing(&client, "alice").await;

    // Refused by the guard (not by RBAC: the message is the policy's). The API server loads a
    // new policy within moments, so a create that passes is deleted and retried.
    let api: Api<Initializer> = Api::all(client.clone());
    wait_for(
        "the guard to refuse the editor",
        Duration::from_secs(20),
        || {
            let (client, api) = (client.clone(), api.clone());
            async move {
                match create_as(&client, "alice", &guard("by-alice")).await {
                    Err(kube::Error::Api(_)) => true,
                    Err(e) => panic!("failed to create as alice: {e}"),
                    Ok(_) => {
                        api.delete("by-alice", &DeleteParams::default())
                            .await
                            .unwrap();
                        false
                    }
                }
            }
        },
    )
    .await;
    match create_as(&client, "alice", &guard("by-alice")).await {
        Err(kube::Error::Api(status)) => {
            println!("refused: {} {}", status.code, status.message);
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains(GUARD_MESSAGE), "{status:?}");
        }
        other => panic!("the editor created an Initializer: {other:?}"),
    }

    // An admin is admitted; the editor may not change its spec either.
    create(&client, &guard("by-admin")).await;
    // A merge patch carries no resourceVersion: the operator's own writes (its finalizer)
    // cannot turn the refusal into a conflict.
    let spec_request = merge_by_admin(json!({"spec": {"replicas": 2}}));
    refused_to_alice(&client, "spec change", spec_request).await;
    // Nor write its status (the operator adopts it after a restart), nor delete it (which
    // switches a security initializer off).
    let status_request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .patch_subresource(
            "status",
            "by-admin",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Unresponsive"}})),
        )
        .unwrap();
    let delete_request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .delete("by-admin", &DeleteParams::default())
        .unwrap();
    for (what, request) in [("status", status_request), ("deletion", delete_request)] {
        refused_to_alice(&client, what, request).await;
    }
    assert!(api.get_opt("by-admin").await.unwrap().is_some());
    // Nor take it out of the path with the break-glass annotation, nor, once an administrator
    // has, put it back or rewrite the reason the administrator gave.
    let break_glass = |value: serde_json::Value| {
        merge_by_admin(json!({"metadata": {"annotations": {BREAK_GLASS_ANNOTATION: value}}}))
    };
    let refused = |what, request| refused_to_alice(&client, what, request);
    refused("break-glass", break_glass(json!("by alice"))).await;
    refused("break-glass with an empty reason", break_glass(json!(""))).await;
    client
        .request::<serde_json::Value>(break_glass(json!("incident 42")))
        .await
        .unwrap_or_else(|e| panic!("an administrator may break the glass: {e}"));
    refused("new break-glass reason", break_glass(json!("all clear"))).await;
    refused("resume", break_glass(serde_json::Value::Null)).await;
    // Nor strip the operator's finalizer: a deletion would then skip the operator's cleanup and
    // could leave what it made in force (a preset's admission policy) with nothing to show it.
    let finalizer = "the operator's finalizer";
    wait_initializer(&api, "by-admin", finalizer, Duration::from_secs(30), |i| {
        i.finalizers().iter().any(|f| f == FINALIZER)
    })
    .await;
    let strip = merge_by_admin(json!({"metadata": {"finalizers": null}}));
    refused("finalizer removal", strip).await;
    assert!(
        api.get("by-admin")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == FINALIZER)
    );
    let live = api.get("by-admin").await.unwrap();
    assert_eq!(
        live.annotations()
            .get(BREAK_GLASS_ANNOTATION)
            .map(String::as_str),
        Some("incident 42")
    );
    client
        .request::<serde_json::Value>(break_glass(serde_json::Value::Null))
        .await
        .unwrap_or_else(|e| panic!("an administrator may resume: {e}"));
    // Metadata-only updates pass: the editor's label, and the operator's finalizer.
    let label_request = merge_by_admin(json!({"metadata": {"labels": {"team": "a"}}}));
    client
        .request::<serde_json::Value>(as_user("alice", label_request))
        .await
        .unwrap_or_else(|e| panic!("a metadata-only update needs no webhook rights: {e}"));
    let finalizer = "the operator's finalizer on by-admin";
    wait_initializer(&api, "by-admin", finalizer, Duration::from_secs(20), |i| {
        i.finalizers()
            .iter()
            .any(|f| f.starts_with("initializer.dev/"))
    })
    .await;

    // Deleting the guard's binding does not switch it off: the operator puts it back.
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(GUARD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let took = wait_for("the guard's binding back", Duration::from_secs(10), || {
        let c = client.clone();
        async move {
            Api::<ValidatingAdmissionPolicyBinding>::all(c)
                .get_opt(GUARD_NAME)
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    println!("guard binding restored {took:?} after its deletion");
}

/// What an install by OLM leaves until the operator's first start: the CRD without the guard.
/// Whoever may create Initializers then (OLM's `edit`) creates one and writes a status that
/// claims it passed the guard. The operator, once started, holds it back (`Valid=False`, not
/// deployed); one created after the guard is deployed; a spec change by an administrator (which
/// passes the guard) releases the first. Deleting the guard's binding (put back at once) keeps
/// both deployed: what was proven and unchanged carries over to the new binding.
async fn an_initializer_created_before_the_guard_is_held_until_its_spec_changes(
    cluster: &TestCluster,
) {
    use initializer_operator::guard::{EARLIER_BINDINGS_ANNOTATION, GUARD_NAME};
    use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;

    let client = cluster.client();
    support::install::install_crd_and_namespace_unguarded(&client, NS).await;
    let api = create(&client, &guard("early")).await;
    api.patch_status(
        "early",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"guard": {"bindingUid": "made-up", "generation": 1, "held": false}}}),
        ),
    )
    .await
    .unwrap();

    let _operator = spawn(cluster, "operator-test-0");
    wait_for("early held back", Duration::from_secs(30), || {
        let c = client.clone();
        async move {
            let status = status_of(&c, "early").await;
            status
                .guard
                .as_ref()
                .is_some_and(|w| w.held && w.binding_uid != "made-up")
                && status.phase == Some(Phase::Invalid)
        }
    })
    .await;
    let held = status_of(&client, "early").await;
    let valid = held.conditions.iter().find(|c| c.type_ == "Valid").unwrap();
    assert_eq!(valid.status, "False");
    assert!(valid.message.contains("held back"), "{valid:?}");
    wait_for_event(&client, "Refused", "held back").await;

    // The guard is in force once the operator is ready: an Initializer created now is deployed.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let first = bindings.get(GUARD_NAME).await.unwrap();
    support::install::until_in_force(&first).await;
    create(&client, &guard("late")).await;
    wait_registered(&client, "late", "late registered", Duration::from_secs(90)).await;
    assert!(configuration(&client, "initializer-early").await.is_none());

    // An administrator changes early's spec: it passed the guard, so early is deployed.
    patch_spec(&api, "early", json!({"timeoutSeconds": 4})).await;
    wait_registered(
        &client,
        "early",
        "early registered",
        Duration::from_secs(90),
    )
    .await;
    let proven = status_of(&client, "early").await.guard.unwrap();
    assert!(!proven.held, "{proven:?}");
    assert_eq!(proven.binding_uid, first.metadata.uid.clone().unwrap());

    // The binding deleted and put back: a new binding that lists the old one, and neither
    // Initializer is held.
    bindings
        .delete(GUARD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let old_uid = first.metadata.uid.clone().unwrap();
    wait_for("the binding put back", Duration::from_secs(20), || {
        let b = bindings.clone();
        let old = old_uid.clone();
        async move {
            b.get_opt(GUARD_NAME).await.unwrap().is_some_and(|b| {
                b.metadata.uid.as_deref() != Some(old.as_str())
                    && b.annotations().get(EARLIER_BINDINGS_ANNOTATION) == Some(&old)
            })
        }
    })
    .await;
    let renewed = bindings
        .get(GUARD_NAME)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for name in ["early", "late"] {
        wait_for(
            &format!("{name}'s witness under the new binding"),
            Duration::from_secs(30),
            || {
                let (c, renewed) = (client.clone(), renewed.clone());
                async move {
                    status_of(&c, name)
                        .await
                        .guard
                        .is_some_and(|w| w.binding_uid == renewed && !w.held)
                }
            },
        )
        .await;
        assert!(
            configuration(&client, &format!("initializer-{name}"))
                .await
                .is_some(),
            "{name} stays registered"
        );
    }
}

/// Applies `spec` to the guard's `kind` (in `admissionregistration.k8s.io/v1`) as another field
/// manager, `intruder`, would.
async fn intrude<K>(api: &Api<K>, kind: &str, spec: serde_json::Value)
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    use initializer_operator::guard::GUARD_NAME;
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": GUARD_NAME},
        "spec": spec,
    });
    let intruder = PatchParams::apply("intruder");
    api.patch(GUARD_NAME, &intruder, &Patch::Apply(body))
        .await
        .unwrap();
}

/// A forced apply keeps what other field managers add beside the operator's fields. Someone who
/// may write the guard (not the operator) adds a `matchConditions` entry that is always false to
/// the policy and an `excludeResourceRules` for Initializers to the binding, each of which
/// switches it off with the binding's UID unchanged: the operator replaces both whole, in
/// place, and an Initializer created by a user without webhook rights is refused again.
async fn what_another_manager_adds_to_the_guard_is_taken_out(cluster: &TestCluster) {
    use initializer_operator::guard::{GUARD_MESSAGE, GUARD_NAME};
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };

    let (client, _operator) = start(cluster).await;
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    wait_for("the guard applied", Duration::from_secs(20), || async {
        bindings.get_opt(GUARD_NAME).await.unwrap().is_some()
    })
    .await;
    let uid = bindings.get(GUARD_NAME).await.unwrap().uid();

    intrude(
        &policies,
        "ValidatingAdmissionPolicy",
        json!({"matchConditions": [{"name": "neuter", "expression": "false"}]}),
    )
    .await;
    intrude(
        &bindings,
        "ValidatingAdmissionPolicyBinding",
        json!({"matchResources": {"excludeResourceRules": [{
            "apiGroups": ["initializer.dev"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*"]
        }]}}),
    )
    .await;

    let took = wait_for("the guard whole again", Duration::from_secs(20), || async {
        let policy = policies.get(GUARD_NAME).await.unwrap();
        let binding = bindings.get(GUARD_NAME).await.unwrap();
        let neutered = policy
            .spec
            .as_ref()
            .and_then(|s| s.match_conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.name == "neuter"));
        let excluded = binding
            .spec
            .match_resources
            .as_ref()
            .and_then(|m| m.exclude_resource_rules.as_ref())
            .is_some_and(|rules| !rules.is_empty());
        !neutered && !excluded
    })
    .await;
    println!("the guard put back whole {took:?} after another manager's additions");
    assert_eq!(
        bindings.get(GUARD_NAME).await.unwrap().uid(),
        uid,
        "the same binding, put back in place"
    );
    // In force: an editor of Initializers without webhook rights is refused by the guard's own
    // message (the API server reloads policies on a one-second tick).
    grant_initializer_editing(&client, "bob").await;
    let refused = wait_for(
        "the guard to refuse the editor",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            async move {
                match create_as(&c, "bob", &guard("by-bob")).await {
                    // The one admitted before the guard was back is still being finalized.
                    Err(kube::Error::Api(status)) if status.code == 409 => false,
                    Err(kube::Error::Api(status)) => {
                        assert!(status.message.contains(GUARD_MESSAGE), "{status:?}");
                        true
                    }
                    Err(e) => panic!("failed to create as bob: {e}"),
                    Ok(_) => {
                        Api::<Initializer>::all(c)
                            .delete("by-bob", &DeleteParams::default())
                            .await
                            .unwrap();
                        false
                    }
                }
            }
        },
    )
    .await;
    println!("the editor refused by the guard again {refused:?} later");
}
