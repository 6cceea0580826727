//! The engine's IO: the compiled policy and its binding applied (first to the canary, then
//! everywhere), the proof by server-side dry-run creates, the drift check and the removal. The
//! policy and binding are written at the version discovery found ([`served_version`]), as
//! dynamic objects: the spec is the same at v1beta1 and v1.
//!
//! [`served_version`]: crate::policy::served::served_version

use std::time::{Duration, Instant};

use initializer_crds::constants::FIELD_MANAGER;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::Value;
use tracing::info;

use super::compare::{self, PROOF_LABEL, ProofObject};
use crate::error::{Error, Result};
use crate::ownership;
use crate::policy::api::{MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use crate::policy::served::{self, Discovered, GROUP, NotServed};
use crate::policy::{BindingScope, Compiled, RequestFacts};
use crate::validate::Validated;

/// How long a policy or binding may take to come in force (the API server reloads admission
/// policies on a one-second tick once its informers have seen them).
pub const IN_FORCE_WITHIN: Duration = Duration::from_secs(30);
/// Between two looks at whether a policy is in force.
const IN_FORCE_POLL: Duration = Duration::from_millis(200);
/// The suffix of the name the drift check dry-run creates the desired objects under.
const DRIFT_CHECK_SUFFIX: &str = "-drift-check";

/// How a proof ended short of a cutover.
#[derive(Debug)]
pub enum Unproven {
    /// The engines disagreed, or the policy failed in the canary: what differed.
    Disproved(String),
    /// The proof could not finish (an API call failed, the policy never came in force).
    Failed(String),
    /// A policy or binding of this Initializer's names is someone else's: left alone.
    Conflict(Error),
}

impl From<Error> for Unproven {
    fn from(err: Error) -> Self {
        if err.is_conflict() {
            Unproven::Conflict(err)
        } else {
            Unproven::Failed(err.to_string())
        }
    }
}

/// What a proof showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proven {
    /// Corpus objects created through both engines, all agreeing.
    pub compared: usize,
    /// Of them, the ones the preset changed.
    pub injected: usize,
    /// From the first apply to the policy confirmed in force everywhere.
    pub took: Duration,
}

/// The version the API server serves MutatingAdmissionPolicy and its binding at, from its
/// discovery of each version the compiler writes, or why none can be used. Uncached: the
/// controller keeps its own answer for a while.
pub async fn served_version(
    client: &Client,
) -> Result<std::result::Result<&'static str, NotServed>> {
    let mut discovered = Vec::new();
    for version in served::VERSIONS {
        let group_version = format!("{GROUP}/{version}");
        match client.list_api_group_resources(&group_version).await {
            Ok(list) => discovered.push(Discovered {
                version: version.to_owned(),
                resources: list.resources.into_iter().map(|r| r.name).collect(),
            }),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Get {
                    kind: "APIResourceList",
                    name: group_version,
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(served::served_version(&discovered))
}

/// The policy and binding of one Initializer at one served version.
#[derive(Clone, Debug)]
pub struct PolicyObjects {
    /// `v1` or `v1beta1`.
    pub version: &'static str,
    /// The name both share.
    pub name: String,
    /// The Initializer's label value, which the objects carry (ours: [`ownership::is_ours`], as
    /// for its fallback).
    pub label: String,
    /// The Initializer, as the objects' owner: when it is removed without the operator's
    /// cleanup (its finalizer stripped), the garbage collector removes them.
    pub owner: Option<OwnerReference>,
}

impl PolicyObjects {
    /// For the Initializer `v` at `version`.
    pub fn new(v: &Validated, version: &'static str) -> Self {
        Self::named(&v.names, version)
    }

    /// For the Initializer of `names` at `version`.
    pub fn named(names: &crate::naming::Names, version: &'static str) -> Self {
        Self {
            version,
            name: crate::policy::compile::policy_name_of(&names.base),
            label: names.label.clone(),
            owner: None,
        }
    }

    /// The same objects, owned by `owner` (the Initializer) once applied.
    pub fn owned_by(self, owner: Option<OwnerReference>) -> Self {
        Self { owner, ..self }
    }

    /// The API of every policy and of every binding at `version`, with their kinds, in the order
    /// they are applied (removed in the reverse one).
    pub fn apis(client: &Client, version: &str) -> [(Api<DynamicObject>, &'static str); 2] {
        let api = |kind: &'static str, plural: &str| {
            let gvk = GroupVersionKind::gvk(GROUP, version, kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
            (Api::all_with(client.clone(), &resource), kind)
        };
        [
            api("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
            api(
                "MutatingAdmissionPolicyBinding",
                "mutatingadmissionpolicybindings",
            ),
        ]
    }

    /// The policy's API and the binding's at this version, with their kinds ([`Self::apis`]).
    fn both(&self, client: &Client) -> [(Api<DynamicObject>, &'static str); 2] {
        Self::apis(client, self.version)
    }

    fn policies(&self, client: &Client) -> Api<DynamicObject> {
        let [(policies, _), _] = self.both(client);
        policies
    }

    fn bindings(&self, client: &Client) -> Api<DynamicObject> {
        let [_, (bindings, _)] = self.both(client);
        bindings
    }

    fn policy_json(&self, policy: &MutatingAdmissionPolicy) -> Result<Value> {
        self.typed_json(policy, "MutatingAdmissionPolicy")
    }

    fn binding_json(&self, binding: &MutatingAdmissionPolicyBinding) -> Result<Value> {
        self.typed_json(binding, "MutatingAdmissionPolicyBinding")
    }

    fn typed_json(&self, object: &impl serde::Serialize, kind: &'static str) -> Result<Value> {
        let mut value = serde_json::to_value(object).map_err(|e| Error::Serialize {
            what: "an admission policy",
            reason: e.to_string(),
        })?;
        value["apiVersion"] = Value::String(format!("{GROUP}/{}", self.version));
        value["kind"] = Value::String(kind.to_owned());
        if let Some(owner) = &self.owner {
            value["metadata"]["ownerReferences"] = serde_json::json!([owner]);
        }
        Ok(value)
    }

    /// How each of the policy and the binding may be applied: [`Error::NotOurs`] when either
    /// exists and is not this Initializer's (it is never taken over); otherwise with `force`
    /// for our own, without for an absent one, so that one someone else creates meanwhile
    /// makes the apply fail with a conflict instead of being taken over.
    pub async fn claim(&self, client: &Client) -> Result<[PatchParams; 2]> {
        let mut params = [
            PatchParams::apply(FIELD_MANAGER),
            PatchParams::apply(FIELD_MANAGER),
        ];
        for ((api, kind), params) in self.both(client).into_iter().zip(params.iter_mut()) {
            let live = api.get_opt(&self.name).await.map_err(|source| Error::Get {
                kind,
                name: self.name.clone(),
                source: Box::new(source),
            })?;
            match live {
                Some(live) if !ownership::is_ours(&live.metadata, &self.label) => {
                    return Err(Error::NotOurs {
                        kind,
                        name: self.name.clone(),
                    });
                }
                Some(_) => *params = PatchParams::apply(FIELD_MANAGER).force(),
                None => {}
            }
        }
        Ok(params)
    }

    /// Applies the policy and the binding (server-side apply, the operator's field manager),
    /// once [`claim`](Self::claim) found neither someone else's.
    pub async fn apply(
        &self,
        client: &Client,
        policy: &MutatingAdmissionPolicy,
        binding: &MutatingAdmissionPolicyBinding,
    ) -> Result<()> {
        let params = self.claim(client).await?;
        let objects = [self.policy_json(policy)?, self.binding_json(binding)?];
        for (((api, kind), params), object) in
            self.both(client).into_iter().zip(params).zip(objects)
        {
            api.patch(&self.name, &params, &Patch::Apply(&object))
                .await
                .map_err(|source| Error::Apply {
                    kind,
                    name: self.name.clone(),
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// Removes the binding, then the policy: only ours; `true` when either existed.
    pub async fn remove(&self, client: &Client) -> Result<bool> {
        let mut removed = false;
        for (api, kind) in self.both(client).into_iter().rev() {
            let found = api.get_opt(&self.name).await.map_err(|source| Error::Get {
                kind,
                name: self.name.clone(),
                source: Box::new(source),
            })?;
            let Some(found) = found else { continue };
            if !ownership::is_ours(&found.metadata, &self.label) {
                continue;
            }
            api.delete(&self.name, &DeleteParams::default())
                .await
                .map_err(|source| Error::Delete {
                    kind,
                    name: self.name.clone(),
                    source: Box::new(source),
                })?;
            removed = true;
        }
        Ok(removed)
    }

    /// Why the live policy or binding is no longer what the operator applied: missing, someone
    /// else's, or its spec differs from the desired one as the API server stores it (a dry-run
    /// create of the desired object under another name shows that, defaults and all, so an
    /// edit of any field counts, not only of those the operator sets). `None`: as applied.
    pub async fn drift(
        &self,
        client: &Client,
        policy: &MutatingAdmissionPolicy,
        binding: &MutatingAdmissionPolicyBinding,
    ) -> Result<Option<String>> {
        let desired = [
            (
                self.policies(client),
                "MutatingAdmissionPolicy",
                self.policy_json(policy)?,
            ),
            (
                self.bindings(client),
                "MutatingAdmissionPolicyBinding",
                self.binding_json(binding)?,
            ),
        ];
        for (api, kind, mut object) in desired {
            let live = api.get_opt(&self.name).await.map_err(|source| Error::Get {
                kind,
                name: self.name.clone(),
                source: Box::new(source),
            })?;
            let Some(live) = live else {
                return Ok(Some(format!("the {kind} {} was deleted", self.name)));
            };
            if !ownership::is_ours(&live.metadata, &self.label) {
                return Ok(Some(format!(
                    "the {kind} {} no longer carries this Initializer's labels",
                    self.name
                )));
            }
            // Under another name; a binding still names the policy, as applied.
            let check_name = format!("{}{DRIFT_CHECK_SUFFIX}", self.name);
            object["metadata"]["name"] = Value::String(check_name.clone());
            let object: DynamicObject =
                serde_json::from_value(object).map_err(|e| Error::Serialize {
                    what: "an admission policy",
                    reason: e.to_string(),
                })?;
            let stored = api
                .create(
                    &PostParams {
                        dry_run: true,
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                    },
                    &object,
                )
                .await
                .map_err(|source| Error::Apply {
                    kind,
                    name: check_name,
                    source: Box::new(source),
                })?;
            let differences = compare::labelled_differences(
                &live.data["spec"],
                &stored.data["spec"],
                ("live", "as applied"),
            );
            if !differences.is_empty() {
                return Ok(Some(format!(
                    "the {kind} {} was edited: {}",
                    self.name,
                    differences.join("; ")
                )));
            }
        }
        Ok(None)
    }
}

/// The binding for the canary: the canary namespace alone, narrowed to objects carrying
/// [`PROOF_LABEL`].
pub fn canary_binding(v: &Validated, canary: &str) -> MutatingAdmissionPolicyBinding {
    let mut binding = crate::policy::binding(v, &BindingScope::Namespaces(vec![canary.to_owned()]));
    if let Some(spec) = binding.spec.as_mut() {
        let resources = spec
            .match_resources
            .get_or_insert_with(MatchResources::default);
        resources.object_selector = Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: PROOF_LABEL.to_owned(),
                operator: "Exists".to_owned(),
                values: None,
            }]),
        });
    }
    binding
}

/// What the API server stores for a create of `object` in `namespace` (a dry run: nothing is
/// stored). Each create goes on a connection of its own (`Connection: close`): a load balancer
/// in front of several API server replicas spreads connections, not requests, so only new
/// connections can land on another replica.
async fn dry_run_create_raw(
    client: &Client,
    namespace: &str,
    proof: &ProofObject,
    object: &Value,
) -> Result<Value, CreateFailure> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(proof.kind.group, proof.kind.version, proof.kind.kind),
        &compare::plural(proof.kind),
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let params = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let body = serde_json::to_vec(object).map_err(|e| CreateFailure::Build(e.to_string()))?;
    let mut request = kube::core::Request::new(api.resource_url())
        .create(&params, body)
        .map_err(|e| CreateFailure::Build(e.to_string()))?;
    request.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    client
        .request::<Value>(request)
        .await
        .map_err(CreateFailure::Api)
}

/// Why a dry-run create stored nothing.
#[derive(Debug)]
enum CreateFailure {
    /// The request could not be built from the object.
    Build(String),
    /// The API server refused it, or did not answer.
    Api(kube::Error),
}

impl std::fmt::Display for CreateFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateFailure::Build(reason) => f.write_str(reason),
            CreateFailure::Api(error) => error.fmt(f),
        }
    }
}

/// [`dry_run_create_raw`], its refusal as text.
async fn dry_run_create(
    client: &Client,
    namespace: &str,
    proof: &ProofObject,
    object: &Value,
) -> Result<Value, String> {
    dry_run_create_raw(client, namespace, proof, object)
        .await
        .map_err(|e| e.to_string())
}

/// Whether the policy (not the webhook) injected `stored`, what the API server stored for a
/// create of `proof` in `namespace`: it needs no injection any more and carries no webhook
/// mark.
fn stored_by_policy(
    compiled: &Compiled,
    proof: &ProofObject,
    namespace: &str,
    stored: &Value,
) -> bool {
    let facts = RequestFacts {
        group: proof.kind.group,
        version: proof.kind.version,
        kind: proof.kind.kind,
        namespace,
    };
    !compiled.program.needs_injection(&facts, stored) && !compare::marked(stored)
}

/// Whether the policy (not the webhook) injected a create of `object` in `namespace`
/// ([`stored_by_policy`]).
async fn injected_by_policy(
    client: &Client,
    namespace: &str,
    compiled: &Compiled,
    proof: &ProofObject,
    object: &Value,
) -> Result<bool, String> {
    let stored = dry_run_create(client, namespace, proof, object).await?;
    Ok(stored_by_policy(compiled, proof, namespace, &stored))
}

/// Waits until a create of `object` in `namespace` is injected by the policy.
async fn until_in_force(
    client: &Client,
    namespace: &str,
    compiled: &Compiled,
    proof: &ProofObject,
    object: &Value,
    what: &str,
) -> Result<(), Unproven> {
    let deadline = Instant::now() + IN_FORCE_WITHIN;
    loop {
        let last = match injected_by_policy(client, namespace, compiled, proof, object).await {
            Ok(true) => return Ok(()),
            Ok(false) => "its creates came back without the policy's injection".to_owned(),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(Unproven::Failed(format!(
                "the policy was not in force {what} within {}s: {last}",
                IN_FORCE_WITHIN.as_secs()
            )));
        }
        tokio::time::sleep(IN_FORCE_POLL).await;
    }
}

/// Dry-run creates each in-force check makes ([`still_in_force`]), each on a connection of its
/// own. A replica that receives a share `f` of new connections escapes one check with
/// probability `(1 - f)^4`: one of three replicas, 20 %, and six checks in a row (a minute at
/// the drift check's period), under 10⁻⁴.
pub const IN_FORCE_SAMPLES: usize = 4;

/// Whether the API server still runs the policy in force everywhere: [`IN_FORCE_SAMPLES`]
/// dry-run creates in the `canary` namespace of a corpus object the preset changes, each on a
/// connection of its own, must all come back injected by the policy (injected, and unmarked by
/// the webhook). An API server that serves MutatingAdmissionPolicy without running its
/// admission plugin (a replica of another version during an upgrade, the plugin disabled)
/// stores them uninjected, or injected by the webhook while it is still registered.
///
/// `Ok(None)`: in force. `Ok(Some(why))`: a create came back uninjected, or was refused (the
/// canary namespace gone, the operator's rights there taken away): nothing proves the policy
/// in force any more. `Err`: no answer from the API server, tried again at the next reconcile.
pub async fn still_in_force(
    client: &Client,
    v: &Validated,
    compiled: &Compiled,
    canary: &str,
) -> Result<Option<String>> {
    let corpus = compare::proof_corpus(v, &compiled.program, canary);
    let Some(probe) = corpus.iter().find(|p| p.injected) else {
        return Ok(Some(format!(
            "no corpus object is changed by the preset in {canary}: nothing shows the policy in \
             force"
        )));
    };
    for sample in 1..=IN_FORCE_SAMPLES {
        let stored = match dry_run_create_raw(client, canary, probe, &probe.object).await {
            Ok(stored) => stored,
            Err(CreateFailure::Api(kube::Error::Api(status))) if status.code < 500 => {
                return Ok(Some(format!(
                    "the API server refused the in-force check's create of {} in {canary}: {}",
                    probe.name, status.message
                )));
            }
            Err(CreateFailure::Api(source)) => {
                return Err(Error::InForceCheck {
                    namespace: canary.to_owned(),
                    source: Box::new(source),
                });
            }
            Err(CreateFailure::Build(reason)) => {
                return Err(Error::Serialize {
                    what: "the in-force check's create",
                    reason,
                });
            }
        };
        if !stored_by_policy(compiled, probe, canary, &stored) {
            return Ok(Some(format!(
                "the API server stored a create of {} in {canary} without the policy's \
                 injection ({sample} of {IN_FORCE_SAMPLES} checks): it serves \
                 MutatingAdmissionPolicy without running it (the admission plugin disabled, or \
                 a replica of another version)",
                probe.name
            )));
        }
    }
    Ok(None)
}

/// Proves the compiled policy against the registered webhook in the `canary` namespace, and
/// puts it in force everywhere when every corpus object agrees:
///
/// 1. the policy, with its binding narrowed to the canary scope ([`canary_binding`]), until a
///    labelled create there comes back injected by it;
/// 2. every corpus object created (dry run) with the proof label (the policy, then the webhook
///    with nothing left to do) and without (the webhook alone): the two stored objects must be
///    the same but for [`compare::comparable`]'s exceptions, and the webhook must have left the
///    policy's output alone (no mark);
/// 3. the binding widened to the webhook's whole scope, until an unlabelled create in the canary
///    namespace comes back injected by the policy, and then [`still_in_force`]: in force where
///    the webhook was, on every API server replica its creates reach.
///
/// On a disagreement the policy and binding are removed before returning. The webhook stays
/// registered throughout: taking it away is the caller's next step.
pub async fn prove(
    client: &Client,
    objects: &PolicyObjects,
    v: &Validated,
    compiled: &Compiled,
    canary: &str,
) -> Result<Proven, Unproven> {
    let started = Instant::now();
    let corpus = compare::proof_corpus(v, &compiled.program, canary);
    let Some(probe) = corpus.iter().find(|p| p.injected).cloned() else {
        return Err(Unproven::Failed(format!(
            "no corpus object is changed by the preset in {canary}"
        )));
    };
    objects
        .apply(client, &compiled.policy, &canary_binding(v, canary))
        .await?;
    let result = async {
        until_in_force(
            client,
            canary,
            compiled,
            &probe,
            &compare::with_proof_label(&probe.object),
            "in the canary",
        )
        .await?;
        let (compared, injected) = compare_corpus(client, canary, &corpus).await?;
        objects
            .apply(
                client,
                &compiled.policy,
                &crate::policy::binding(v, &BindingScope::Everywhere),
            )
            .await?;
        until_in_force(
            client,
            canary,
            compiled,
            &probe,
            &probe.object,
            "everywhere",
        )
        .await?;
        if let Some(why) = still_in_force(client, v, compiled, canary).await? {
            return Err(Unproven::Failed(why));
        }
        Ok::<_, Unproven>(Proven {
            compared,
            injected,
            took: started.elapsed(),
        })
    }
    .await;
    if let Err(Unproven::Disproved(_)) = &result {
        objects.remove(client).await?;
    }
    result
}

/// Creates every corpus object through both engines and compares; returns how many were
/// compared and how many the preset changed.
async fn compare_corpus(
    client: &Client,
    canary: &str,
    corpus: &[ProofObject],
) -> Result<(usize, usize), Unproven> {
    let mut injected = 0;
    for proof in corpus {
        let labelled = compare::with_proof_label(&proof.object);
        let by_policy = dry_run_create(client, canary, proof, &labelled).await;
        let by_webhook = dry_run_create(client, canary, proof, &proof.object)
            .await
            .map_err(|e| {
                Unproven::Failed(format!(
                    "the webhook refused {} in {canary}: {e}",
                    proof.name
                ))
            })?;
        let by_policy = by_policy.map_err(|e| {
            Unproven::Disproved(format!(
                "{}: the API server refused its create through the policy ({e}); the webhook \
                 accepted it",
                proof.name
            ))
        })?;
        if compare::marked(&by_policy) {
            return Err(Unproven::Disproved(format!(
                "{}: the webhook still changed what the policy stored",
                proof.name
            )));
        }
        let differences = compare::differences(
            &compare::comparable(&by_policy),
            &compare::comparable(&by_webhook),
        );
        if !differences.is_empty() {
            return Err(Unproven::Disproved(format!(
                "{}: {}",
                proof.name,
                differences.join("; ")
            )));
        }
        if proof.injected {
            injected += 1;
        }
    }
    info!(
        canary,
        compared = corpus.len(),
        injected,
        "the policy agrees with the webhook"
    );
    Ok((corpus.len(), injected))
}
