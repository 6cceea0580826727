//! Unit tests of [`crate::ownership`].

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::BTreeMap;

const UID: &str = "11111111-2222-3333-4444-555555555555";

fn owner(uid: &str, controller: Option<bool>) -> OwnerReference {
    OwnerReference {
        api_version: "initializer.dev/v1alpha1".into(),
        kind: "Initializer".into(),
        name: "guard".into(),
        uid: uid.into(),
        controller,
        block_owner_deletion: Some(true),
    }
}

fn meta(labelled: bool, owners: Vec<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some("guard-config".into()),
        labels: labelled.then(|| {
            BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string())])
        }),
        owner_references: (!owners.is_empty()).then_some(owners),
        ..Default::default()
    }
}

#[test]
fn nothing_there_is_created() {
    assert_eq!(ownership(None, Some(UID)), Ownership::Absent);
    assert_eq!(ownership(None, None), Ownership::Absent);
}

#[test]
fn our_label_and_a_controller_reference_to_this_initializer_make_it_ours() {
    let live = meta(true, vec![owner(UID, Some(true))]);
    assert_eq!(ownership(Some(&live), Some(UID)), Ownership::Ours);
}

#[test]
fn only_secrets_with_our_label_lend_their_keys() {
    assert!(labelled_ours(&meta(true, vec![])));
    assert!(!labelled_ours(&meta(false, vec![owner(UID, Some(true))])));
}

#[test]
fn a_users_object_of_the_same_name_is_not_ours() {
    assert_eq!(
        ownership(Some(&meta(false, vec![])), Some(UID)),
        Ownership::NotOurs
    );
}

#[test]
fn the_label_alone_is_not_enough() {
    // Anyone who can create a ConfigMap can set the label.
    assert_eq!(
        ownership(Some(&meta(true, vec![])), Some(UID)),
        Ownership::NotOurs
    );
}

#[test]
fn an_owner_reference_alone_is_not_enough() {
    let live = meta(false, vec![owner(UID, Some(true))]);
    assert_eq!(ownership(Some(&live), Some(UID)), Ownership::NotOurs);
}

#[test]
fn another_initializers_object_is_not_ours() {
    // An Initializer deleted and recreated under the same name has a new UID.
    let live = meta(true, vec![owner("another-uid", Some(true))]);
    assert_eq!(ownership(Some(&live), Some(UID)), Ownership::NotOurs);
}

#[test]
fn a_reference_that_is_not_the_controller_is_not_enough() {
    for controller in [None, Some(false)] {
        let live = meta(true, vec![owner(UID, controller)]);
        assert_eq!(ownership(Some(&live), Some(UID)), Ownership::NotOurs);
    }
}

#[test]
fn without_an_owner_uid_nothing_existing_is_ours() {
    let live = meta(true, vec![owner(UID, Some(true))]);
    assert_eq!(ownership(Some(&live), None), Ownership::NotOurs);
}

fn labelled(labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some("initializer-guard-fallback".into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn a_fallback_is_ours_with_the_operators_label_and_this_initializers() {
    let ours = labelled(&[
        (MANAGED_BY_LABEL, MANAGED_BY_VALUE),
        (INITIALIZER_LABEL, "guard"),
    ]);
    assert!(fallback_is_ours(&ours, Some("guard")));
    assert!(fallback_is_ours(&ours, None));
    assert!(!fallback_is_ours(&ours, Some("other")));
}

#[test]
fn an_administrators_policy_of_the_fallbacks_name_is_not_ours() {
    assert!(!fallback_is_ours(&labelled(&[]), None));
    assert!(!fallback_is_ours(
        &labelled(&[(MANAGED_BY_LABEL, "helm"), (INITIALIZER_LABEL, "guard")]),
        Some("guard")
    ));
    assert!(!fallback_is_ours(
        &labelled(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
        None
    ));
}

#[test]
fn the_owner_uid_is_read_from_the_desired_objects_controller_reference() {
    let desired = meta(true, vec![owner("other", None), owner(UID, Some(true))]);
    assert_eq!(controller_uid(&desired), Some(UID));
    assert_eq!(controller_uid(&meta(true, vec![])), None);
}

#[test]
fn only_a_configuration_with_both_labels_naming_it_is_the_operators_to_delete() {
    let labels = |pairs: &[(&str, &str)]| ObjectMeta {
        labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    let ours = labels(&[
        (MANAGED_BY_LABEL, MANAGED_BY_VALUE),
        (INITIALIZER_LABEL, "sidecar"),
    ]);
    assert!(registered_by_operator(&ours, "initializer-sidecar"));
    assert!(
        !registered_by_operator(&ours, "initializer-other"),
        "the label names another Initializer's configuration"
    );
    let managed_only = labels(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]);
    assert!(!registered_by_operator(
        &managed_only,
        "initializer-sidecar"
    ));
    let owner_only = labels(&[(INITIALIZER_LABEL, "sidecar")]);
    assert!(!registered_by_operator(&owner_only, "initializer-sidecar"));
    let long = "x".repeat(100);
    let names = crate::naming::names(&long);
    let ours_long = labels(&[
        (MANAGED_BY_LABEL, MANAGED_BY_VALUE),
        (INITIALIZER_LABEL, &names.label),
    ]);
    assert!(registered_by_operator(&ours_long, &names.configuration));
}

#[test]
fn a_configuration_is_ours_only_with_both_labels_naming_this_initializer() {
    let both = labelled(&[
        (MANAGED_BY_LABEL, MANAGED_BY_VALUE),
        (INITIALIZER_LABEL, "guard"),
    ]);
    assert!(is_ours(&both, "guard"));
    assert!(!is_ours(&both, "other"), "another Initializer's");
    let unmanaged = labelled(&[(INITIALIZER_LABEL, "guard")]);
    assert!(!is_ours(&unmanaged, "guard"), "no managed-by label");
    let foreign = labelled(&[(MANAGED_BY_LABEL, "helm"), (INITIALIZER_LABEL, "guard")]);
    assert!(!is_ours(&foreign, "guard"), "someone else manages it");
    let unnamed = labelled(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]);
    assert!(!is_ours(&unnamed, "guard"), "no Initializer label");
    assert!(registered_by_operator(&both, "initializer-guard"));
    assert!(!registered_by_operator(&both, "initializer-other"));
    assert!(!registered_by_operator(&unnamed, "initializer-guard"));
}
