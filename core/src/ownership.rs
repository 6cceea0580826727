//! Whether an object in the cluster is the operator's, decided in one place. The operator never
//! takes over, changes or deletes an object it did not create, and everything that writes or
//! removes asks here first: the workload (labels and a controller owner reference,
//! [`ownership`]), the admission configurations of either backend ([`is_ours`],
//! [`registered_by_operator`]), and the cluster-scoped fallback and admission policies, which
//! carry no owner reference ([`fallback_is_ours`]).
//!
//! The managed-by label alone proves nothing (anyone who may write the object may set it): every
//! check here also asks for something only the operator sets together with it.

use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What the cluster holds under the name of an object the operator wants to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Nothing: the operator creates it.
    Absent,
    /// This Initializer's object: the managed-by label and a controller owner reference with
    /// the Initializer's UID. The operator may change it (and garbage collection deletes it).
    Ours,
    /// Someone else's object of the same name: never changed, adopted or deleted.
    NotOurs,
}

/// Decides whether the live object `live` (if any) belongs to the Initializer with UID
/// `owner_uid`. Without an owner UID nothing that exists can be proven ours.
pub fn ownership(live: Option<&ObjectMeta>, owner_uid: Option<&str>) -> Ownership {
    let Some(meta) = live else {
        return Ownership::Absent;
    };
    let owned = owner_uid.is_some_and(|uid| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == uid)
    });
    if labelled_ours(meta) && owned {
        Ownership::Ours
    } else {
        Ownership::NotOurs
    }
}

/// Whether an object carries the operator's managed-by label: necessary, never sufficient.
/// Secrets without it are not the operator's, so their keys are never used (the apply that
/// follows refuses them).
pub fn labelled_ours(meta: &ObjectMeta) -> bool {
    label(meta, MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
}

/// Whether an admission configuration (of either backend) found in the cluster is the one the
/// operator registered for the Initializer whose label value is `initializer_label`: the
/// operator's managed-by label and that Initializer's label. Anything else under the name
/// belongs to someone else and is neither taken over, changed nor deleted.
pub fn is_ours(meta: &ObjectMeta, initializer_label: &str) -> bool {
    labelled_ours(meta) && label(meta, INITIALIZER_LABEL) == Some(initializer_label)
}

/// Whether a configuration named `name` with `meta` is one the operator registered, whichever
/// Initializer it was for: both labels, the Initializer label naming an Initializer whose
/// configuration is `name` ([`crate::naming::names`]).
pub fn registered_by_operator(meta: &ObjectMeta, name: &str) -> bool {
    labelled_ours(meta)
        && label(meta, INITIALIZER_LABEL)
            .is_some_and(|owner| crate::naming::names(owner).configuration == name)
}

/// Whether a live fallback policy or binding (or a preset's admission policy) is the one the
/// operator put in force for the Initializer labelled `initializer_label`: [`is_ours`], since
/// cluster-scoped objects carry no owner reference. With no label to compare, any
/// Initializer's label will do.
pub fn fallback_is_ours(live: &ObjectMeta, initializer_label: Option<&str>) -> bool {
    match initializer_label {
        Some(expected) => is_ours(live, expected),
        None => labelled_ours(live) && label(live, INITIALIZER_LABEL).is_some(),
    }
}

/// The UID of the controller owner reference on a desired object (the Initializer's).
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

#[cfg(test)]
mod tests;
