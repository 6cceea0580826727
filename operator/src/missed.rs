//! Missed initializations: after a fail-open window, the objects in the Initializer's scope
//! that were created in the window without a valid mark of the initializer (the SDK marks every
//! object it changes, see [`INITIALIZED_BY_ANNOTATION`]). Deciding what counts is pure; [`count`]
//! lists metadata only, page by page, within a bound.
//!
//! The mark is an annotation, which the object's author can write too: a mark counts only when
//! the initializer made it (`initializer_mark`): its MAC, with a key derived from the
//! initializer's serving key, is right for this object's namespace, group, resource and name
//! (or `generateName`), and its time stamp is within `initializer_mark::WINDOW_SECONDS` of the
//! object's `creationTimestamp`. An unsigned mark (`<name>/<generation>`, what the SDK wrote
//! before, and what anyone can write), one with a wrong MAC, one made for another object or
//! copied from one created at another time counts as no mark: the object is missed.
//!
//! In scope means what the webhook would have matched: a resource the rules name (with CREATE),
//! the registered namespace and object selectors, and the annotation gate. Wildcard resources
//! are not listed (they are named in `unchecked`), nor resources the operator may not list.
//! `creationTimestamp` has whole seconds, so the window is widened to whole seconds; an object
//! the initializer changed carries the mark and is never counted, so widening only matters for
//! objects it deliberately left alone.

use std::collections::BTreeMap;

use initializer_crds::constants::INITIALIZED_BY_ANNOTATION;
use initializer_crds::{AnnotationGate, InterceptRule, MissedInitializations, Operation};
use initializer_mark::{Keys, Stored};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};

use crate::probe::kind_for;

/// Objects listed per page.
pub const PAGE: u32 = 500;
/// Objects looked at per resource before the scan stops (the count is then a lower bound).
pub const MAX_SCANNED: usize = 10_000;
/// Names reported as examples.
pub const EXAMPLES: usize = 5;

/// What decides whether an object was missed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scope {
    /// The initializer's name, as it marks objects.
    pub initializer: String,
    /// The registered webhook's namespace selector.
    pub namespace_selector: Option<LabelSelector>,
    /// The registered webhook's object selector.
    pub object_selector: Option<LabelSelector>,
    /// The annotation gate.
    pub gate: Option<AnnotationGate>,
    /// The keys a valid mark is made with.
    pub keys: Keys,
    /// The window's first and last instants.
    pub from: Timestamp,
    /// See `from`.
    pub to: Timestamp,
}

/// Whether `labels` satisfy a label selector (an absent selector matches everything; an
/// unknown operator matches nothing).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && selector.match_expressions.iter().flatten().all(|e| {
            let value = labels.get(&e.key);
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Whether the object, listed as `resource`, carries a mark `initializer` made for it with one
/// of `keys` (see the module's documentation); a name alone, or any mark its author could
/// write, is not one.
pub fn is_marked(
    keys: &Keys,
    initializer: &str,
    resource: &ApiResource,
    meta: &ObjectMeta,
) -> bool {
    let Some(Time(created)) = meta.creation_timestamp.as_ref() else {
        return false;
    };
    let object = Stored {
        namespace: meta.namespace.as_deref().unwrap_or_default(),
        group: &resource.group,
        resource: &resource.plural,
        name: meta.name.as_deref().unwrap_or_default(),
        generate_name: meta.generate_name.as_deref().unwrap_or_default(),
        created: created.as_second(),
    };
    let value = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(INITIALIZED_BY_ANNOTATION))
        .map(String::as_str);
    initializer_mark::verify(keys, initializer, value, &object).is_ok()
}

/// Whether the object was created in the window, widened to whole seconds.
pub fn created_in(meta: &ObjectMeta, from: Timestamp, to: Timestamp) -> bool {
    let Some(Time(created)) = meta.creation_timestamp.as_ref() else {
        return false;
    };
    let (c, f, t) = (created.as_second(), from.as_second(), to.as_second());
    let t = if to.subsec_nanosecond() > 0 { t + 1 } else { t };
    c >= f && c <= t
}

/// Whether an object listed as `resource` (with its namespace's labels, for namespaced objects)
/// was created in the window, in scope, and without a valid mark.
pub fn missed(
    scope: &Scope,
    resource: &ApiResource,
    meta: &ObjectMeta,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    if !created_in(meta, scope.from, scope.to)
        || is_marked(&scope.keys, &scope.initializer, resource, meta)
    {
        return false;
    }
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    if scope
        .object_selector
        .as_ref()
        .is_some_and(|s| !selector_matches(s, labels))
    {
        return false;
    }
    if meta.namespace.is_some() {
        let ns = namespace_labels.unwrap_or(&empty);
        if scope
            .namespace_selector
            .as_ref()
            .is_some_and(|s| !selector_matches(s, ns))
        {
            return false;
        }
    }
    scope.gate.as_ref().is_none_or(|gate| {
        let value = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(&gate.name))
            .map(|v| v.trim());
        match value {
            Some(v) => v != "false",
            None => !gate.required,
        }
    })
}

/// The resources to list for these rules: every named resource (no wildcard, no subresource)
/// of every named group and version, for rules that intercept CREATE. The rest are returned
/// as descriptions for `unchecked`.
pub fn resources(rules: &[InterceptRule]) -> (Vec<ApiResource>, Vec<String>) {
    let mut listed: Vec<ApiResource> = Vec::new();
    let mut unchecked = Vec::new();
    for rule in rules {
        if !rule
            .operations
            .iter()
            .any(|o| matches!(o, Operation::Create | Operation::All))
        {
            continue;
        }
        for resource in &rule.resources {
            if resource.contains('/') {
                continue;
            }
            if resource.contains('*') {
                unchecked.push(format!("{resource}: wildcard resources are not counted"));
                continue;
            }
            for group in &rule.api_groups {
                for version in &rule.api_versions {
                    if group.contains('*') || version.contains('*') {
                        unchecked.push(format!(
                            "{resource} in group {group:?} version {version:?}: wildcards are not counted"
                        ));
                        continue;
                    }
                    // One version per group and resource: they are the same objects.
                    if listed
                        .iter()
                        .any(|r| r.group == *group && r.plural == *resource)
                    {
                        continue;
                    }
                    let api_version = if group.is_empty() {
                        version.clone()
                    } else {
                        format!("{group}/{version}")
                    };
                    listed.push(ApiResource {
                        group: group.clone(),
                        version: version.clone(),
                        api_version,
                        kind: kind_for(resource),
                        plural: resource.clone(),
                    });
                }
            }
        }
    }
    unchecked.dedup();
    (listed, unchecked)
}

fn display(resource: &ApiResource, meta: &ObjectMeta) -> String {
    let name = meta.name.clone().unwrap_or_default();
    match &meta.namespace {
        Some(ns) => format!("{}/{ns}/{name}", resource.plural),
        None => format!("{}/{name}", resource.plural),
    }
}

/// Every namespace's labels, by name.
async fn namespace_labels(
    client: &Client,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, kube::Error> {
    let list = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|n| {
            (
                n.metadata.name.unwrap_or_default(),
                n.metadata.labels.unwrap_or_default(),
            )
        })
        .collect())
}

/// Counts the missed initializations of one window: lists the metadata of every resource the
/// rules name, page by page and at most [`MAX_SCANNED`] objects per resource, and the
/// namespaces' labels when a namespace selector needs them.
pub async fn count(
    client: &Client,
    rules: &[InterceptRule],
    scope: &Scope,
) -> MissedInitializations {
    let (listed, mut unchecked) = resources(rules);
    let mut namespaces = None;
    if scope.namespace_selector.is_some() {
        match namespace_labels(client).await {
            Ok(labels) => namespaces = Some(labels),
            Err(e) => unchecked.push(format!("namespaces could not be listed: {e}")),
        }
    }
    let mut count = 0i64;
    let mut examples = Vec::new();
    let mut truncated = false;
    for resource in &listed {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
        let mut params = ListParams::default().limit(PAGE);
        let mut scanned = 0usize;
        loop {
            let page = match api.list_metadata(&params).await {
                Ok(page) => page,
                Err(e) => {
                    unchecked.push(format!("{}: {e}", resource.plural));
                    break;
                }
            };
            for item in &page.items {
                scanned += 1;
                let ns_labels = item
                    .metadata
                    .namespace
                    .as_ref()
                    .and_then(|ns| namespaces.as_ref().and_then(|all| all.get(ns)));
                if scope.namespace_selector.is_some()
                    && item.metadata.namespace.is_some()
                    && namespaces.is_none()
                {
                    continue;
                }
                if missed(scope, resource, &item.metadata, ns_labels) {
                    count += 1;
                    if examples.len() < EXAMPLES {
                        examples.push(display(resource, &item.metadata));
                    }
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) if scanned < MAX_SCANNED => params = params.continue_token(&token),
                Some(_) => {
                    truncated = true;
                    break;
                }
                None => break,
            }
        }
    }
    MissedInitializations {
        count,
        examples,
        from: Time(scope.from),
        to: Time(scope.to),
        truncated,
        unchecked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use initializer_mark::{Identity, MarkKey, Retired};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn deployments() -> ApiResource {
        resources(&[InterceptRule {
            api_groups: vec!["apps".into()],
            api_versions: vec!["v1".into()],
            resources: vec!["deployments".into()],
            operations: vec![Operation::Create],
            scope: None,
        }])
        .0
        .remove(0)
    }

    fn check(
        scope: &Scope,
        meta: &ObjectMeta,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        missed(scope, &deployments(), meta, namespace_labels)
    }

    /// The initializer's key (what its serving key gives).
    fn key() -> MarkKey {
        MarkKey::from_serving_key_der(b"the initializer's serving key")
    }

    /// A mark as the SDK signs it for Deployment `name` in `apps`, stamped `time`.
    fn signed(key: &MarkKey, generation: Option<i64>, name: &str, time: i64) -> String {
        let identity = Identity::at_admission("apps", "apps", "deployments", name, "");
        initializer_mark::sign(key, "sidecar", generation, &identity, time)
    }

    fn ts(s: i64, ms: i64) -> Timestamp {
        Timestamp::from_millisecond(s * 1000 + ms).unwrap()
    }

    fn meta(ns: Option<&str>, created: i64, annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("obj".into()),
            namespace: ns.map(String::from),
            creation_timestamp: Some(Time(ts(created, 0))),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn scope() -> Scope {
        Scope {
            initializer: "sidecar".into(),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["kube-system".into()]),
                }]),
            }),
            object_selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "initializer.dev/excluded".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                }]),
            }),
            gate: Some(AnnotationGate {
                name: "initializer.kubernetes.io/sidecar".into(),
                required: true,
            }),
            keys: Keys::current(key()),
            from: ts(100, 400),
            to: ts(105, 200),
        }
    }

    fn team_a() -> BTreeMap<String, String> {
        BTreeMap::from([("team".into(), "a".into())])
    }

    const GATE: (&str, &str) = ("initializer.kubernetes.io/sidecar", "true");

    #[test]
    fn an_unmarked_object_in_scope_created_in_the_window_is_missed() {
        assert!(check(
            &scope(),
            &meta(Some("apps"), 102, &[GATE]),
            Some(&team_a())
        ));
    }

    #[test]
    fn objects_the_initializer_marked_are_not_missed_whatever_the_generation() {
        let good = signed(&key(), Some(3), "obj", 102);
        for mark in [
            good.clone(),
            signed(&key(), None, "obj", 102),
            format!("proxy/2,{good}"),
            format!("proxy/2, sidecar/1, {good}"),
            // Stamped by the initializer's clock, a few seconds off the API server's.
            signed(&key(), Some(3), "obj", 95),
        ] {
            let m = meta(
                Some("apps"),
                102,
                &[GATE, (INITIALIZED_BY_ANNOTATION, &mark)],
            );
            assert!(!check(&scope(), &m, Some(&team_a())), "{mark}");
        }
        // Made by generateName before the API server named the object.
        let identity = Identity::at_admission("apps", "apps", "deployments", "", "web-");
        let mark = initializer_mark::sign(&key(), "sidecar", Some(3), &identity, 102);
        let mut m = meta(
            Some("apps"),
            102,
            &[GATE, (INITIALIZED_BY_ANNOTATION, &mark)],
        );
        m.name = Some("web-7xk2q".into());
        m.generate_name = Some("web-".into());
        assert!(!check(&scope(), &m, Some(&team_a())), "{mark}");
    }

    #[test]
    fn marks_an_author_can_write_do_not_hide_an_object() {
        // Each of these hid the object before marks were signed.
        let forged = [
            // The old, unsigned forms: anyone can write them.
            "sidecar".to_string(),
            "sidecar/3".to_string(),
            "proxy,sidecar/1".to_string(),
            "proxy/2, sidecar".to_string(),
            // The signed form with a made-up MAC.
            format!("sidecar/3/t=102/{}", "A".repeat(43)),
            // Made with another key.
            signed(
                &MarkKey::from_serving_key_der(b"not the key"),
                Some(3),
                "obj",
                102,
            ),
            // A genuine mark copied from another object...
            signed(&key(), Some(3), "other", 102),
            // ... or from this name's earlier object, created a minute before.
            signed(&key(), Some(3), "obj", 42),
            // A genuine mark with its generation or time stamp edited.
            signed(&key(), Some(3), "obj", 102).replacen("sidecar/3/", "sidecar/4/", 1),
            signed(&key(), Some(3), "obj", 90).replacen("t=90/", "t=102/", 1),
            // Another initializer's name.
            "sidecar-2/1".to_string(),
        ];
        for mark in forged {
            let m = meta(
                Some("apps"),
                102,
                &[GATE, (INITIALIZED_BY_ANNOTATION, &mark)],
            );
            assert!(check(&scope(), &m, Some(&team_a())), "{mark}");
        }
        // Nor in another namespace, or listed as another resource.
        let good = signed(&key(), Some(3), "obj", 102);
        let elsewhere = meta(
            Some("apps-2"),
            102,
            &[GATE, (INITIALIZED_BY_ANNOTATION, &good)],
        );
        assert!(check(&scope(), &elsewhere, Some(&team_a())));
        let here = meta(
            Some("apps"),
            102,
            &[GATE, (INITIALIZED_BY_ANNOTATION, &good)],
        );
        let mut statefulsets = deployments();
        statefulsets.plural = "statefulsets".into();
        assert!(missed(&scope(), &statefulsets, &here, Some(&team_a())));
        // Without a key (the serving key unreadable), no mark is trusted.
        let keyless = Scope {
            keys: Keys::default(),
            ..scope()
        };
        assert!(check(&keyless, &here, Some(&team_a())));
    }

    #[test]
    fn marks_of_the_replaced_serving_key_are_trusted_until_its_end() {
        let old = MarkKey::from_serving_key_der(b"the serving key before the rotation");
        let s = Scope {
            keys: Keys {
                current: Some(key()),
                previous: Some(Retired {
                    key: old.clone(),
                    until: 102,
                }),
            },
            ..scope()
        };
        let at = |created: i64, time: i64| {
            meta(
                Some("apps"),
                created,
                &[
                    GATE,
                    (
                        INITIALIZED_BY_ANNOTATION,
                        &signed(&old, Some(3), "obj", time),
                    ),
                ],
            )
        };
        assert!(!check(&s, &at(102, 102), Some(&team_a())));
        assert!(check(&s, &at(103, 103), Some(&team_a())));
    }

    #[test]
    fn the_window_is_widened_to_whole_seconds() {
        let s = scope();
        for (created, inside) in [
            (99, false),
            (100, true),
            (105, true),
            (106, true),
            (107, false),
        ] {
            assert_eq!(
                check(&s, &meta(Some("apps"), created, &[GATE]), Some(&team_a())),
                inside,
                "{created}"
            );
        }
    }

    #[test]
    fn objects_out_of_scope_are_not_missed() {
        let s = scope();
        let ungated = meta(Some("apps"), 102, &[]);
        assert!(!check(&s, &ungated, Some(&team_a())), "no gate annotation");
        let gated_off = meta(
            Some("apps"),
            102,
            &[("initializer.kubernetes.io/sidecar", "false")],
        );
        assert!(!check(&s, &gated_off, Some(&team_a())));
        let other_team = BTreeMap::from([("team".into(), "b".into())]);
        assert!(!check(
            &s,
            &meta(Some("apps"), 102, &[GATE]),
            Some(&other_team)
        ));
        let mut own_pod = meta(Some("apps"), 102, &[GATE]);
        own_pod.labels = Some(BTreeMap::from([(
            "initializer.dev/excluded".into(),
            "true".into(),
        )]));
        assert!(!check(&s, &own_pod, Some(&team_a())));
        let optional = Scope {
            gate: Some(AnnotationGate {
                name: "initializer.kubernetes.io/sidecar".into(),
                required: false,
            }),
            ..scope()
        };
        assert!(check(&optional, &ungated, Some(&team_a())));
    }

    #[test]
    fn named_resources_are_listed_once_and_wildcards_are_reported() {
        let rule = |groups: &[&str], versions: &[&str], resources: &[&str], op: Operation| {
            let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect();
            InterceptRule {
                api_groups: s(groups),
                api_versions: s(versions),
                resources: s(resources),
                operations: vec![op],
                scope: None,
            }
        };
        let (listed, unchecked) = resources(&[
            rule(
                &["apps"],
                &["v1", "v1beta1"],
                &["deployments", "deployments/scale"],
                Operation::Create,
            ),
            rule(&[""], &["v1"], &["secrets", "*"], Operation::All),
            rule(&[""], &["v1"], &["configmaps"], Operation::Update),
        ]);
        let names: Vec<(String, String, String)> = listed
            .iter()
            .map(|r| (r.api_version.clone(), r.plural.clone(), r.kind.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("apps/v1".into(), "deployments".into(), "Deployment".into()),
                ("v1".into(), "secrets".into(), "Secret".into()),
            ]
        );
        assert_eq!(unchecked.len(), 1);
    }
}
