//! Unit tests of [`crate::route`].

use super::*;
use crate::build::{self, is_degraded};
use crate::validate::{tests::sidecar, validate};

fn webhook() -> MutatingWebhookConfiguration {
    let v = validate(&sidecar().spec, "initializer-system", "sidecar").unwrap();
    build::webhook(&v, "-----BEGIN CERTIFICATE-----\n")
}

#[test]
fn the_proving_configuration_fails_open_and_adds_only_the_check_after_the_webhook() {
    let webhook = webhook();
    let own = webhook.webhooks.clone().unwrap().remove(0);
    let proving = proving(&webhook, "sidecar-init", "sidecar");
    assert!(is_degraded(&proving), "it fails open");
    assert!(
        is_proving(&proving) && !is_proving(&webhook) && !is_proving(&build::degraded(&webhook))
    );
    let hooks = proving.webhooks.unwrap();
    assert_eq!(hooks.len(), 2);
    assert_eq!(
        hooks[0].name, own.name,
        "the Initializer's webhook stays first"
    );
    assert_eq!(hooks[0].failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(hooks[0].rules, own.rules);
    let check = &hooks[1];
    assert_eq!(check.name, format!("route-check.{}", own.name));
    assert_eq!(check.client_config.ca_bundle, own.client_config.ca_bundle);
    let (service, own_service) = (
        check.client_config.service.clone().unwrap(),
        own.client_config.service.clone().unwrap(),
    );
    assert_eq!(
        service.path.as_deref(),
        Some("/route-check"),
        "no handler runs there"
    );
    assert_eq!(
        (service.name, service.namespace, service.port),
        (own_service.name, own_service.namespace, own_service.port),
        "the same Service"
    );
    assert_eq!(
        check.failure_policy.as_deref(),
        Some("Ignore"),
        "the check never blocks"
    );
    assert_eq!(check.timeout_seconds, Some(1));
    assert_eq!(
        check.side_effects, "None",
        "dry runs call only side-effect-free webhooks"
    );
    let labels = |s: &Option<LabelSelector>| s.clone().unwrap().match_labels.unwrap();
    assert_eq!(
        labels(&check.namespace_selector),
        BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), "sidecar-init".to_string())])
    );
    assert_eq!(
        labels(&check.object_selector),
        BTreeMap::from([(ROUTE_CHECK_LABEL.to_string(), "sidecar".to_string())])
    );
    let rules = check.rules.clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].resources, Some(vec!["configmaps".to_string()]));
    assert_eq!(rules[0].operations, Some(vec!["CREATE".to_string()]));
    assert_eq!(
        check
            .match_conditions
            .as_ref()
            .map(|c| c[0].expression.as_str()),
        Some("request.dryRun == true")
    );
}

#[test]
fn the_check_object_is_selected_by_the_check_webhook() {
    let object = check_object("sidecar-init", "sidecar", 0xabc);
    assert_eq!(
        object.metadata.name.as_deref(),
        Some("route-check-0000000000000abc")
    );
    assert_eq!(object.metadata.namespace.as_deref(), Some("sidecar-init"));
    let check = check_webhook(&webhook().webhooks.unwrap()[0], "sidecar-init", "sidecar");
    let wanted = check.object_selector.unwrap().match_labels.unwrap();
    assert_eq!(object.metadata.labels.unwrap(), wanted);
}

#[test]
fn only_the_check_webhooks_answer_for_this_object_proves_the_route() {
    let name = "route-check-0000000000000abc";
    let check = check_name("sidecar.initializers.initializer.dev");
    let refusal = |webhook: &str, object: &str| {
        format!(
            "admission webhook \"{webhook}\" denied the request: {}",
            answer(object, Some(Carried::NewConnection))
        )
    };
    let proves = |refusal: &str| reached(refusal, &check, name).is_some_and(Answered::proves_route);
    assert!(proves(&refusal(&check, name)));
    let another = refusal(&check, "route-check-0000000000000abd");
    assert!(!proves(&another), "another check's answer");
    let longer = refusal(&check, "route-check-0000000000000abcd");
    assert!(!proves(&longer), "the name is a prefix of it");
    let elsewhere = refusal(&check_name("other.initializers.initializer.dev"), name);
    assert!(
        !proves(&elsewhere),
        "another initializer's check webhook, whose Service is not this one"
    );
    let failed = format!(
        "Internal error occurred: failed calling webhook \"{check}\": failed to call webhook: Post \"https://sidecar.sidecar-init.svc:443/route-check?timeout=1s\": dial tcp 10.96.0.9:443: connect: connection refused"
    );
    assert!(!proves(&failed));
    let forbidden = "configmaps \"route-check-0000000000000abc\" is forbidden: User cannot create";
    assert!(!proves(forbidden));
}

#[test]
fn an_answer_on_a_reused_connection_proves_nothing_and_one_that_does_not_say_is_taken() {
    let name = "route-check-0000000000000abc";
    let check = check_name("sidecar.initializers.initializer.dev");
    let refusal = |carried| {
        format!(
            "admission webhook \"{check}\" denied the request: {}",
            answer(name, carried)
        )
    };
    let seen = |carried| reached(&refusal(carried), &check, name);
    assert_eq!(
        seen(Some(Carried::ReusedConnection)),
        Some(Answered {
            carried: Some(Carried::ReusedConnection)
        })
    );
    assert!(
        !seen(Some(Carried::ReusedConnection))
            .unwrap()
            .proves_route()
    );
    assert_eq!(
        seen(Some(Carried::NewConnection)),
        Some(Answered {
            carried: Some(Carried::NewConnection)
        })
    );
    assert_eq!(seen(None), Some(Answered { carried: None }));
    assert!(seen(None).unwrap().proves_route());
}

#[test]
fn an_answer_with_anything_after_it_is_not_the_checks() {
    let name = "route-check-0000000000000abc";
    let check = check_name("sidecar.initializers.initializer.dev");
    let denied = format!("admission webhook \"{check}\" denied the request: ");
    let reached_by = |message: &str| reached(&format!("{denied}{message}"), &check, name);
    for other in [
        "route check reached route-check-0000000000000abc; on a reused connection",
        "route check reached route-check-0000000000000abc on a reused connection, or not",
        "route check reached route-check-0000000000000abc on a new connection.",
        "route check reached route-check-0000000000000abc (on a reused connection)",
        "route check reached route-check-0000000000000abc ",
    ] {
        assert_eq!(reached_by(other), None, "{other}");
    }
    assert_eq!(
        reached_by("route check reached route-check-0000000000000abc"),
        Some(Answered { carried: None }),
        "the answer alone, as an initializer that does not say gives it"
    );
}
