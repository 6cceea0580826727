//! Unit tests of [`crate::apiserver::initialization`].

use super::*;

fn config(name: &str, initializers: Value) -> Value {
    json!({"metadata": {"name": name}, "initializers": initializers})
}

fn rule(groups: &[&str], versions: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "apiVersions": versions, "resources": resources})
}

#[test]
fn names_come_from_configurations_sorted_by_name_in_their_order() {
    let b = config(
        "b",
        json!([{"name": "b1.example.com", "rules": [rule(&["*"], &["*"], &["deployments"])]},
                   {"name": "b2.example.com", "rules": [rule(&["apps"], &["v1"], &["deployments"])]}]),
    );
    let a = config(
        "a",
        json!([{"name": "a1.example.com", "rules": [rule(&["*"], &["*"], &["*"])]}]),
    );
    let names = matching_initializers(&[&b, &a], "apps", "v1", "deployments");
    assert_eq!(
        names,
        ["a1.example.com", "b1.example.com", "b2.example.com"]
    );
    assert_eq!(
        matching_initializers(&[&b, &a], "", "v1", "pods"),
        ["a1.example.com"]
    );
}

#[test]
fn every_rule_must_match_and_an_initializer_without_rules_matches_nothing() {
    let two_rules = [
        rule(&[""], &["v1"], &["pods"]),
        rule(&["apps"], &["v1"], &["deployments"]),
    ];
    assert!(!rules_match(&two_rules, "", "v1", "pods"));
    assert!(!rules_match(&two_rules, "apps", "v1", "deployments"));
    assert!(!rules_match(&[], "", "v1", "pods"));
}

#[test]
fn wildcards_count_first_and_subresources_never_match() {
    for (rule, want) in [
        (rule(&["*"], &["*"], &["*/*"]), true),
        (rule(&["apps"], &["v1"], &["deployments/status"]), false),
        (rule(&["", "apps"], &["v1"], &["pods", "deployments"]), true),
        (rule(&["apps"], &["v1beta1"], &["deployments"]), false),
    ] {
        let matched = rules_match(std::slice::from_ref(&rule), "apps", "v1", "deployments");
        assert_eq!(matched, want, "{rule}");
    }
}

#[test]
fn a_new_object_gets_the_matching_names_unless_its_creator_set_initializers() {
    let plain = json!({"metadata": {"name": "x"}});
    assert_eq!(
        assign_on_create(&plain, vec!["a.b.c".into()]),
        Assignment::Set(json!({"pending": [{"name": "a.b.c"}]}))
    );
    assert_eq!(assign_on_create(&plain, vec![]), Assignment::Unchanged);
    let self_excluded = json!({"metadata": {"name": "x", "initializers": {"pending": []}}});
    assert_eq!(
        assign_on_create(&self_excluded, vec!["a.b.c".into()]),
        Assignment::Remove
    );
    let explicit =
        json!({"metadata": {"name": "x", "initializers": {"pending": [{"name": "me.b.c"}]}}});
    assert_eq!(
        assign_on_create(&explicit, vec!["a.b.c".into()]),
        Assignment::Unchanged
    );
    let mirror =
        json!({"metadata": {"name": "x", "annotations": {"kubernetes.io/config.mirror": "h"}}});
    assert_eq!(
        assign_on_create(&mirror, vec!["a.b.c".into()]),
        Assignment::Unchanged
    );
}

#[test]
fn removing_the_last_name_initializes_and_a_result_keeps_the_field() {
    let done = json!({"metadata": {"initializers": {"pending": []}}});
    assert_eq!(settle_update(&done), Assignment::Remove);
    let failed =
        json!({"metadata": {"initializers": {"pending": [], "result": {"status": "Failure"}}}});
    assert_eq!(settle_update(&failed), Assignment::Unchanged);
    let mut obj = done.clone();
    apply(&mut obj, settle_update(&done));
    assert!(is_initialized(&obj));
}

#[test]
fn an_object_with_any_initializers_is_uninitialized() {
    assert!(is_initialized(&json!({"metadata": {}})));
    assert!(is_initialized(&json!({"metadata": {"initializers": null}})));
    assert!(!is_initialized(
        &json!({"metadata": {"initializers": {"pending": [{"name": "a.b.c"}]}}})
    ));
    assert_eq!(
        pending_names(
            &json!({"metadata": {"initializers": {"pending": [{"name": "a.b.c"}, {"name": "d.e.f"}]}}})
        ),
        ["a.b.c", "d.e.f"]
    );
}

#[test]
fn configurations_are_refused_as_1_13_refused_them() {
    // The configuration a real 1.13 server was sent (sandbox README), cause by cause.
    let c = config(
        "sidecar",
        json!([
            {"name": "sidecar", "rules": [rule(&["*"], &["*"], &["deployments"])]},
            {"name": "Sidecar.Example.Com", "rules": [{"apiGroups": [], "apiVersions": ["*", "v1"], "resources": ["*", "pods"]}]},
            {"name": ""},
            {"name": "ok.example.com", "rules": [{"apiGroups": ["*", "apps"], "apiVersions": [""], "resources": ["pods/status", "*/*"]}]},
            {"name": "initializer.k8s.io"}
        ]),
    );
    let dns = dns1123_subdomain_errors("Sidecar.Example.Com").join(",");
    let expected: Vec<(&str, String)> = vec![
            (
                "initializers[0].name",
                "Invalid value: \"sidecar\": should be a domain with at least three segments separated by dots".into(),
            ),
            (
                "initializers[1].name",
                format!("Invalid value: \"Sidecar.Example.Com\": {dns}"),
            ),
            ("initializers[1].rules[0].apiGroups", "Required value".into()),
            (
                "initializers[1].rules[0].apiVersions",
                "Invalid value: []string{\"*\", \"v1\"}: if '*' is present, must not specify other API versions".into(),
            ),
            (
                "initializers[1].rules[0].resources",
                "Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources".into(),
            ),
            ("initializers[2].name", "Required value".into()),
            (
                "initializers[3].rules[0].apiGroups",
                "Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups".into(),
            ),
            ("initializers[3].rules[0].apiVersions[0]", "Required value".into()),
            (
                "initializers[3].rules[0].resources[0]",
                "Invalid value: \"pods/status\": must not specify subresources".into(),
            ),
            (
                "initializers[3].rules[0].resources[1]",
                "Invalid value: \"*/*\": must not specify subresources".into(),
            ),
        ];
    let expected: Vec<Cause> = expected
        .into_iter()
        .map(|(f, m)| (f.to_string(), m))
        .collect();
    assert_eq!(validate_configuration(&c), expected);
}

#[test]
fn pending_names_must_be_fully_qualified_and_results_failures() {
    let obj = json!({"metadata": {"initializers": {
            "pending": [{"name": "ok.example.com"}, {"name": "Bad_Name"}, {"name": "short.io"}, {"name": ""}],
            "result": {"status": "Success"}}}});
    let causes = validate_initializers(&obj);
    let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "metadata.initializers.pending[1].name",
            "metadata.initializers.pending[2].name",
            "metadata.initializers.pending[3].name",
            "metadata.initializers.result.status",
        ]
    );
    assert!(causes[0].1.contains("a DNS-1123 subdomain must consist"));
    assert_eq!(
        causes[1].1,
        "Invalid value: \"short.io\": should be a domain with at least three segments separated by dots"
    );
    assert_eq!(causes[2].1, "Required value");
    assert_eq!(causes[3].1, "Invalid value: \"Success\": must be 'Failure'");
}

#[test]
fn initializers_cannot_come_back_and_a_result_cannot_change() {
    let none = json!({"metadata": {}});
    let pending = json!({"metadata": {"initializers": {"pending": [{"name": "a.b.c"}]}}});
    let failed = json!({"metadata": {"initializers": {"pending": [{"name": "a.b.c"}], "result": {"status": "Failure", "message": "no"}}}});
    assert_eq!(
        validate_initializers_update(&pending, &none)[0].1,
        "Invalid value: \"null\": field is immutable once initialization has completed"
    );
    assert!(validate_initializers_update(&none, &pending).is_empty());
    assert!(validate_initializers_update(&failed, &pending).is_empty());
    assert_eq!(validate_initializers_update(&pending, &failed).len(), 1);
    assert!(validate_initializers_update(&failed, &failed).is_empty());
}

#[test]
fn a_wait_ends_on_initialization_failure_or_deletion() {
    let pending = json!({"metadata": {"initializers": {"pending": [{"name": "a.b.c"}]}}});
    let done = json!({"metadata": {"name": "x"}});
    let failed =
        json!({"metadata": {"initializers": {"result": {"status": "Failure", "code": 403}}}});
    assert_eq!(wait_step(false, &pending), WaitStep::Waiting);
    assert_eq!(wait_step(false, &done), WaitStep::Initialized(done.clone()));
    assert_eq!(
        wait_step(false, &failed),
        WaitStep::Failed(json!({"status": "Failure", "code": 403}))
    );
    assert!(matches!(wait_step(true, &failed), WaitStep::Failed(_)));
    assert_eq!(wait_step(true, &pending), WaitStep::Deleted);
}

#[test]
fn each_step_past_pending_is_the_creates_answer() {
    let done = json!({"metadata": {"name": "x"}});
    assert_eq!(WaitStep::Waiting.answer(), None);
    assert_eq!(WaitStep::Initialized(done.clone()).answer(), Some(Ok(done)));
    let failed = WaitStep::Failed(json!({"status": "Failure", "code": 403, "message": "no"}))
        .answer()
        .unwrap()
        .unwrap_err();
    assert_eq!((failed.code, failed.message.as_str()), (403, "no"));
    let deleted = WaitStep::Deleted.answer().unwrap().unwrap_err();
    assert_eq!(deleted, deleted_while_waiting());
}

#[test]
fn a_result_is_stored_as_the_protobuf_status_1_13_kept() {
    let mut obj = json!({"metadata": {"initializers": {"result":
            {"kind": "Status", "apiVersion": "v1", "status": "Failure"}}}});
    encode_result_as_go(&mut obj);
    assert_eq!(
        obj["metadata"]["initializers"]["result"],
        json!({"status": "Failure", "metadata": {}})
    );
    let mut given = json!({"metadata": {"initializers": {"result": {"metadata": {"x": 1}}}}});
    encode_result_as_go(&mut given);
    assert_eq!(
        given["metadata"]["initializers"]["result"]["metadata"],
        json!({"x": 1})
    );
    let mut none = json!({"metadata": {"initializers": {"pending": []}}});
    encode_result_as_go(&mut none);
    assert_eq!(none, json!({"metadata": {"initializers": {"pending": []}}}));
}

#[test]
fn a_result_without_a_code_answers_500() {
    assert_eq!(result_error(&json!({"status": "Failure"})).code, 500);
    let e = result_error(
        &json!({"status": "Failure", "code": 403, "reason": "Forbidden", "message": "no"}),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (403, "Forbidden", "no")
    );
    let timeout = timeout_error(Duration::from_secs(30));
    assert_eq!(
        (timeout.code, timeout.message.as_str()),
        (
            504,
            "Timeout: request did not complete within requested timeout 30s"
        )
    );
    assert_eq!(deleted_while_waiting().code, 500);
}

#[test]
fn timeouts_parse_as_go_durations_and_default_to_thirty_seconds() {
    assert_eq!(create_timeout(None), Duration::from_secs(30));
    assert_eq!(create_timeout(Some("")), Duration::from_secs(30));
    assert_eq!(create_timeout(Some("2s")), Duration::from_secs(2));
    assert_eq!(create_timeout(Some("1m30s")), Duration::from_secs(90));
    assert_eq!(create_timeout(Some("1.5s")), Duration::from_millis(1500));
    assert_eq!(create_timeout(Some("300ms")), Duration::from_millis(300));
    assert_eq!(create_timeout(Some("0")), Duration::ZERO);
    // Go needs a unit; "5" is an error, and an error means the default.
    assert_eq!(create_timeout(Some("5")), Duration::from_secs(30));
    assert_eq!(create_timeout(Some("-1s")), Duration::from_secs(30));
    assert_eq!(create_timeout(Some("2x")), Duration::from_secs(30));
}

#[test]
fn durations_print_as_go_prints_them() {
    for (d, text) in [
        (Duration::ZERO, "0s"),
        (Duration::from_secs(30), "30s"),
        (Duration::from_secs(90), "1m30s"),
        (Duration::from_secs(120), "2m0s"),
        (Duration::from_secs(3600), "1h0m0s"),
        (Duration::from_millis(1500), "1.5s"),
        (Duration::from_millis(500), "500ms"),
        (Duration::from_micros(1500), "1.5ms"),
        (Duration::from_nanos(1500), "1.5µs"),
        (Duration::from_nanos(7), "7ns"),
    ] {
        assert_eq!(go_duration(d), text);
    }
}

#[test]
fn include_uninitialized_is_read_as_the_era_read_it() {
    assert!(include_uninitialized_on_create(Some("1")));
    assert!(include_uninitialized_on_create(Some("true")));
    assert!(!include_uninitialized_on_create(Some("false")));
    assert!(!include_uninitialized_on_create(None));
    assert!(include_uninitialized_on_list(Some("true")));
    assert!(include_uninitialized_on_list(Some("")));
    assert!(include_uninitialized_on_list(Some("yes")));
    assert!(!include_uninitialized_on_list(Some("FALSE")));
    assert!(!include_uninitialized_on_list(Some("0")));
    assert!(!include_uninitialized_on_list(None));
}
