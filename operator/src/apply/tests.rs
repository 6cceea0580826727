//! Unit tests of [`crate::apply`].

use super::*;

#[test]
fn only_the_ca_in_the_operator_namespace_is_kept_never_one_planted_beside_the_workload() {
    let ca = |n: &str| Ca {
        cert_pem: format!("cert-{n}"),
        key_pem: format!("key-{n}"),
    };
    assert_eq!(ca_to_keep(Some(ca("a")), Some(ca("b"))), Some(ca("a")));
    assert_eq!(ca_to_keep(None, Some(ca("planted"))), None);
    assert_eq!(ca_to_keep(None, None), None);
}

#[test]
fn a_status_is_applied_onto_the_version_it_was_computed_from() {
    let status = InitializerStatus::default();
    let fenced = status_patch(&status, Some("42"));
    assert_eq!(fenced["metadata"]["resourceVersion"], "42");
    assert_eq!(fenced["kind"], "Initializer");
    // Without a known version (an object never read) the write is unconditional.
    let unconditional = status_patch(&status, None);
    assert!(unconditional.get("metadata").is_none());
}
