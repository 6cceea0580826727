//! Unit tests of [`crate::initializer`].

use super::*;
use crate::protected::protected_reached;

#[test]
fn a_rule_without_a_scope_intercepts_namespaced_objects_only() {
    let rule: InterceptRule = serde_json::from_value(serde_json::json!({
        "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
    }))
    .unwrap();
    assert_eq!(rule.scope, Some(Scope::Namespaced));
    assert_eq!(
        InterceptRule::default().effective_scope(),
        Scope::Namespaced
    );
    let crd = serde_json::to_value(<Initializer as kube::CustomResourceExt>::crd()).unwrap();
    let scope = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["rules"]["items"]["properties"]["scope"];
    assert_eq!(scope["default"], "Namespaced", "{scope}");
}

#[test]
fn the_backend_defaults_to_webhook_and_is_guarded_by_a_transition_rule() {
    let spec: InitializerSpec = serde_json::from_value(serde_json::json!({
        "image": "x", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }))
    .unwrap();
    assert_eq!(spec.backend, Backend::Webhook);
    let crd = serde_json::to_value(<Initializer as kube::CustomResourceExt>::crd()).unwrap();
    let spec_schema =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let backend = &spec_schema["properties"]["backend"];
    assert_eq!(backend["default"], "Webhook", "{backend}");
    assert_eq!(
        backend["enum"],
        serde_json::json!(["Webhook", "InitializerConfiguration"])
    );
    let rules = spec_schema["x-kubernetes-validations"].as_array().unwrap();
    let rule = rules
        .iter()
        .find(|r| r["rule"].as_str().unwrap().contains("oldSelf.backend"))
        .expect("a transition rule on spec.backend");
    assert!(
        rule["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.backend is immutable")
    );
}

#[test]
fn protected_reached_follows_the_api_servers_wildcard_forms() {
    let core = [String::new()];
    assert_eq!(
        protected_reached(&core, "serviceaccounts/*"),
        ["core/serviceaccounts/token"]
    );
    assert!(
        protected_reached(&core, "*/token").contains(&"core/serviceaccounts/token".to_string())
    );
    assert!(protected_reached(&core, "serviceaccounts").is_empty());
    assert!(protected_reached(&core, "serviceaccounts/status").is_empty());
    assert!(protected_reached(&core, "configmaps/*").is_empty());
    assert_eq!(protected_reached(&core, "pods/*"), ["core/pods/binding"]);
    assert!(protected_reached(&core, "pods").is_empty());
    assert_eq!(
        protected_reached(&core, "*"),
        ["core/events", "core/nodes", "core/persistentvolumes"],
        "`*` reaches no subresource"
    );
    assert_eq!(protected_reached(&core, "nodes/status"), ["core/nodes"]);
    let every = ["*".to_string()];
    let all = protected_reached(&every, "*/*");
    assert!(all.contains(&"core/serviceaccounts/token".to_string()));
    assert!(all.contains(&"admissionregistration.k8s.io/*".to_string()));
    assert_eq!(
        all.len(),
        23,
        "six core entries, two of storage, two of networking, thirteen whole groups: {all:?}"
    );
    assert_eq!(
        protected_reached(&every, "clusterroles"),
        ["rbac.authorization.k8s.io/clusterroles"]
    );
    assert!(protected_reached(&every, "pods").is_empty());
    let rbac = ["rbac.authorization.k8s.io".to_string()];
    assert_eq!(
        protected_reached(&rbac, "anything"),
        ["rbac.authorization.k8s.io/*"]
    );
    assert!(protected_reached(&["apps".to_string()], "*/*").is_empty());
}

/// `ALL` lists every value the schema allows, each named as serde writes it.
#[test]
fn phase_and_engine_names_are_their_status_values() {
    fn schema_values<T: schemars::JsonSchema>() -> Vec<String> {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
        let values = schema["enum"]
            .as_array()
            .or_else(|| schema["oneOf"].as_array())
            .unwrap_or_else(|| panic!("no enum in {schema}"));
        values
            .iter()
            .map(|v| {
                v.as_str()
                    .or_else(|| v["const"].as_str())
                    .or_else(|| v["enum"][0].as_str())
                    .unwrap_or_else(|| panic!("not a name: {v}"))
                    .to_string()
            })
            .collect()
    }
    let phases: Vec<String> = Phase::ALL.iter().map(|p| p.as_str().to_string()).collect();
    assert_eq!(phases, schema_values::<Phase>());
    for phase in Phase::ALL {
        assert_eq!(serde_json::to_value(phase).unwrap(), phase.as_str());
    }
    let engines: Vec<String> = EngineInForce::ALL
        .iter()
        .map(|e| e.as_str().to_string())
        .collect();
    assert_eq!(engines, schema_values::<EngineInForce>());
    for engine in EngineInForce::ALL {
        assert_eq!(serde_json::to_value(engine).unwrap(), engine.as_str());
    }
}

#[test]
fn either_switch_suspends_and_the_break_glass_is_named_first() {
    let mut initializer: Initializer = serde_json::from_value(serde_json::json!({
        "apiVersion": "initializer.dev/v1alpha1", "kind": "Initializer",
        "metadata": {"name": "guard"},
        "spec": {"image": "x", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
    }))
    .unwrap();
    assert_eq!(initializer.suspension(), None);
    initializer.spec.suspend = true;
    assert_eq!(initializer.suspension(), Some(Suspension::Spec));
    // Present is on, whatever the value: the value is the reason, an empty one included.
    for reason in ["", "false", "incident 42"] {
        initializer.metadata.annotations = Some(BTreeMap::from([(
            crate::constants::BREAK_GLASS_ANNOTATION.to_string(),
            reason.to_string(),
        )]));
        initializer.spec.suspend = false;
        assert_eq!(
            initializer.suspension(),
            Some(Suspension::BreakGlass),
            "{reason:?}"
        );
        initializer.spec.suspend = true;
        assert_eq!(
            initializer.suspension(),
            Some(Suspension::BreakGlass),
            "{reason:?}"
        );
    }
    initializer.metadata.annotations = Some(BTreeMap::from([(
        "initializer.dev/break-glass-note".to_string(),
        "not the switch".to_string(),
    )]));
    initializer.spec.suspend = false;
    assert!(!initializer.is_suspended());
}
