//! Unit tests of [`crate::build`].

use super::*;
use crate::tls;
use crate::validate::{tests::sidecar, validate};
use initializer_crds::{ConfigMapKey, ConfigSource, PresetConfig};
use std::sync::LazyLock;

pub(crate) static TLS: LazyLock<TlsMaterial> = LazyLock::new(|| {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    tls::ensure(
        None,
        None,
        &tls::dns_names("sidecar", "initializer-system"),
        now,
    )
    .unwrap()
});

pub(crate) fn settings() -> Settings {
    Settings {
        preset_image: "ghcr.io/initializer-dev/preset-initializer:0.1.0".into(),
        network_policy: None,
    }
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "initializer.dev/v1alpha1".into(),
        kind: "Initializer".into(),
        name: "sidecar".into(),
        uid: "uid-1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn validated() -> Validated {
    validate(&sidecar().spec, "initializer-system", "sidecar").unwrap()
}

fn desired() -> Desired {
    build(&validated(), &TLS, &settings(), Some(&owner()))
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.template.spec.as_ref().unwrap()
}

#[test]
fn building_twice_gives_identical_objects() {
    assert_eq!(desired(), desired());
}

#[test]
fn namespaced_objects_are_owned_and_the_configuration_is_not() {
    let d = desired();
    for m in [
        &d.ca_secret.metadata,
        &d.service_account.metadata,
        &d.tls_secret.metadata,
        &d.config_map.as_ref().unwrap().metadata,
        &d.deployment.metadata,
        &d.service.metadata,
        &d.pdb.metadata,
    ] {
        assert_eq!(m.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(m.namespace.as_deref(), Some("initializer-system"));
        assert_eq!(
            m.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
            MANAGED_BY_VALUE
        );
        assert_eq!(m.labels.as_ref().unwrap()[INITIALIZER_LABEL], "sidecar");
    }
    assert!(d.webhook.metadata.owner_references.is_none());
    assert!(d.webhook.metadata.namespace.is_none());
    assert_eq!(
        d.webhook.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
        MANAGED_BY_VALUE
    );
}

#[test]
fn pods_run_as_their_own_service_account_with_no_token_unless_asked() {
    let d = desired();
    assert_eq!(d.service_account.metadata.name.as_deref(), Some("sidecar"));
    assert_eq!(
        d.service_account
            .metadata
            .owner_references
            .as_ref()
            .unwrap()[0]
            .uid,
        "uid-1"
    );
    assert_eq!(
        d.service_account.automount_service_account_token,
        Some(false)
    );
    let pod = pod_spec(&d.deployment);
    assert_eq!(pod.service_account_name.as_deref(), Some("sidecar"));
    assert_eq!(pod.automount_service_account_token, Some(false));

    let mut v = validated();
    v.spec.api_access = true;
    let d = build(&v, &TLS, &settings(), Some(&owner()));
    assert_eq!(
        d.service_account.automount_service_account_token,
        Some(true)
    );
    assert_eq!(
        pod_spec(&d.deployment).automount_service_account_token,
        Some(true)
    );
}

#[test]
fn the_ca_stays_in_the_operator_namespace_and_is_never_mounted() {
    let mut v = validated();
    v.namespace = "team-hooks".into();
    let d = build(&v, &TLS, &settings(), Some(&owner()));
    assert_eq!(
        d.ca_secret.metadata.namespace.as_deref(),
        Some("initializer-system")
    );
    for m in [
        &d.tls_secret.metadata,
        &d.service_account.metadata,
        &d.deployment.metadata,
    ] {
        assert_eq!(m.namespace.as_deref(), Some("team-hooks"));
    }
    let mounted: Vec<_> = pod_spec(&d.deployment)
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(mounted, ["sidecar-tls"]);
    assert!(!d.tls_secret.data.as_ref().unwrap().contains_key("ca.key"));
}

#[test]
fn secrets_hold_the_ca_and_the_serving_certificate() {
    let d = desired();
    assert_eq!(d.tls_secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = d.tls_secret.data.as_ref().unwrap();
    assert_eq!(data["tls.crt"].0, TLS.cert_pem.as_bytes());
    assert_eq!(data["tls.key"].0, TLS.key_pem.as_bytes());
    assert_eq!(data["ca.crt"].0, TLS.ca.cert_pem.as_bytes());
    let ca = d.ca_secret.data.as_ref().unwrap();
    assert_eq!(ca["ca.key"].0, TLS.ca.key_pem.as_bytes());
    assert!(
        !data.contains_key("ca.key"),
        "the CA key must never be mounted"
    );
}

#[test]
fn the_retired_mark_key_is_kept_in_the_ca_secret_and_never_mounted() {
    assert!(
        !desired()
            .ca_secret
            .data
            .unwrap()
            .contains_key(tls::RETIRED_MARK_KEY)
    );
    let retired = initializer_mark::Retired {
        key: initializer_mark::MarkKey::from_serving_key_der(b"the replaced serving key"),
        until: 1_800_000_600,
    };
    let material = TlsMaterial {
        retired_mark_key: Some(retired.clone()),
        ..TLS.clone()
    };
    let d = build(&validated(), &material, &settings(), None);
    assert_eq!(
        tls::retired_from(d.ca_secret.data.as_ref().unwrap()),
        Some(retired)
    );
    let mounted = d.tls_secret.data.unwrap();
    assert!(!mounted.contains_key(tls::RETIRED_MARK_KEY));
    assert!(!mounted.contains_key(tls::RETIRED_MARK_KEY_UNTIL));
}

#[test]
fn the_config_map_holds_inline_config_or_the_preset() {
    let d = desired();
    let cm = d.config_map.unwrap();
    assert!(cm.data.unwrap()[CONFIG_FILE].contains("sidecar-nginx"));
    let mut spec = sidecar().spec;
    spec.image = None;
    spec.config = None;
    spec.preset = Some(PresetConfig::default());
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    let d = build(&v, &TLS, &settings(), None);
    let text = d.config_map.unwrap().data.unwrap()[CONFIG_FILE].clone();
    assert_eq!(
        serde_saphyr::from_str::<PresetConfig>(&text).unwrap(),
        PresetConfig::default()
    );
    let c = &pod_spec(&d.deployment).containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("ghcr.io/initializer-dev/preset-initializer:0.1.0")
    );
}

#[test]
fn a_config_map_reference_is_projected_as_config_yaml() {
    let mut spec = sidecar().spec;
    spec.config = Some(ConfigSource {
        inline: None,
        config_map_ref: Some(ConfigMapKey {
            name: "mine".into(),
            key: "sidecar.yaml".into(),
        }),
    });
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    let d = build(&v, &TLS, &settings(), None);
    assert!(d.config_map.is_none());
    let vols = pod_spec(&d.deployment).volumes.clone().unwrap();
    let cm = vols
        .iter()
        .find(|v| v.name == "config")
        .unwrap()
        .config_map
        .clone()
        .unwrap();
    assert_eq!(cm.name, "mine");
    let items = cm.items.unwrap();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("sidecar.yaml", CONFIG_FILE)
    );
}

#[test]
fn initializer_pods_carry_the_exclusion_label_and_the_contract_env() {
    let d = desired();
    let template = &d.deployment.spec.template;
    let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert_eq!(labels[EXCLUDE_LABEL], EXCLUDE_LABEL_VALUE);
    let c = &pod_spec(&d.deployment).containers[0];
    let env = c.env.as_ref().unwrap();
    let get = |n: &str| env.iter().find(|e| e.name == n).unwrap();
    assert_eq!(
        get(POD_IP_ENV)
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "status.podIP"
    );
    assert_eq!(get(TLS_DIR_ENV).value.as_deref(), Some(TLS_DIR));
    assert_eq!(get(CONFIG_DIR_ENV).value.as_deref(), Some(CONFIG_DIR));
    assert_eq!(get(INITIALIZER_NAME_ENV).value.as_deref(), Some("sidecar"));
    assert_eq!(get(TIMEOUT_SECONDS_ENV).value.as_deref(), Some("5"));
    // The container's own memory limit, in bytes, which the SDK sizes its body budget from.
    let memory = get(MEMORY_LIMIT_ENV)
        .value_from
        .as_ref()
        .and_then(|from| from.resource_field_ref.as_ref())
        .expect("the memory limit comes from the downward API");
    assert_eq!(memory.container_name.as_deref(), Some(CONTAINER_NAME));
    assert_eq!(memory.resource, "limits.memory");
    assert_eq!(memory.divisor, None);
    assert_eq!(
        get(ANNOTATION_ENV).value.as_deref(),
        Some("initializer.kubernetes.io/sidecar")
    );
    assert_eq!(get(REQUIRE_ANNOTATION_ENV).value.as_deref(), Some("true"));
    assert_eq!(c.args.as_ref().unwrap()[0], "--annotation");
}

#[test]
fn user_env_never_replaces_the_contract_and_keeps_its_last_value() {
    let mut spec = sidecar().spec;
    spec.env = vec![
        env("TLS_DIR", "/elsewhere"),
        env("LOG", "debug"),
        env("LOG", "info"),
    ];
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    let vars = container_env(&v);
    let tls: Vec<_> = vars.iter().filter(|e| e.name == "TLS_DIR").collect();
    assert_eq!(tls.len(), 1);
    assert_eq!(tls[0].value.as_deref(), Some(TLS_DIR));
    let log: Vec<_> = vars.iter().filter(|e| e.name == "LOG").collect();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].value.as_deref(), Some("info"));
}

#[test]
fn the_log_level_sets_rust_log_only_when_it_is_not_the_default() {
    let log = |vars: &[EnvVar]| -> Vec<Option<String>> {
        vars.iter()
            .filter(|e| e.name == LOG_ENV)
            .map(|e| e.value.clone())
            .collect()
    };
    let mut spec = sidecar().spec;
    assert_eq!(spec.log_level, LogLevel::Info);
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert!(
        log(&container_env(&v)).is_empty(),
        "the default adds nothing"
    );
    spec.log_level = LogLevel::Debug;
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(log(&container_env(&v)), [Some("debug".to_string())]);
    spec.env = vec![env(LOG_ENV, "initializer_sdk=trace")];
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(
        log(&container_env(&v)),
        [Some("initializer_sdk=trace".to_string())],
        "the user's RUST_LOG wins"
    );
}

#[test]
fn the_deployment_is_hardened_spread_and_never_drops_below_ready() {
    let d = desired();
    let spec = &d.deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let ru = spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
    let pod = pod_spec(&d.deployment);
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    let spread = &pod.topology_spread_constraints.as_ref().unwrap()[0];
    assert_eq!(spread.topology_key, "kubernetes.io/hostname");
    assert_eq!(spread.when_unsatisfiable, "ScheduleAnyway");
    assert!(pod.affinity.as_ref().unwrap().pod_anti_affinity.is_some());
    let ready = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(
        (ready.path.as_deref(), ready.scheme.as_deref()),
        (Some(READYZ_PATH), Some("HTTPS"))
    );
    let liveness = c.liveness_probe.as_ref().unwrap();
    let live = liveness.http_get.as_ref().unwrap();
    assert_eq!(live.path.as_deref(), Some(HEALTHZ_PATH));
    assert!(
        liveness.timeout_seconds > c.readiness_probe.as_ref().unwrap().timeout_seconds,
        "a busy pod leaves the path (readiness) long before it is restarted (liveness)"
    );
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("https"), 8443)
    );
    let mounts: Vec<_> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(mounts, [TLS_DIR, CONFIG_DIR]);
}

#[test]
fn user_resources_replace_the_defaults() {
    let mut spec = sidecar().spec;
    spec.resources = Some(ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("1".into()))])),
        ..Default::default()
    });
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(resources(&v).requests.unwrap()["cpu"].0, "1");
    spec.resources = Some(ResourceRequirements::default());
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(resources(&v).requests.unwrap()["cpu"].0, "50m");
}

#[test]
fn while_the_ca_rotates_the_bundle_carries_the_old_and_the_new_ca() {
    let later = jiff::Timestamp::from_second(1_800_000_000).unwrap()
        + jiff::SignedDuration::from_hours(24 * 365 * 7);
    let rotated = tls::ensure(
        Some(TLS.ca.clone()),
        Some((TLS.cert_pem.clone(), TLS.key_pem.clone())),
        &tls::dns_names("sidecar", "initializer-system"),
        later,
    )
    .unwrap();
    let d = build(&validated(), &rotated, &settings(), None);
    let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
    let bundle = String::from_utf8(hook.client_config.ca_bundle.clone().unwrap().0).unwrap();
    let blocks = tls::certificate_blocks(&bundle);
    assert_eq!(blocks.len(), 2, "{bundle}");
    assert_eq!(format!("{}\n", blocks[0]), rotated.ca.current_pem());
    assert_eq!(format!("{}\n", blocks[1]), TLS.ca.current_pem());
    // The CA Secret keeps both, so that the next reconcile reads the rotation back.
    let ca = d.ca_secret.data.as_ref().unwrap();
    assert_eq!(ca["ca.crt"].0, bundle.as_bytes());
    // Retired, the bundle is the new CA alone.
    let retired = TlsMaterial {
        ca: rotated.ca.retire_previous(),
        ..rotated.clone()
    };
    let d = build(&validated(), &retired, &settings(), None);
    let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
    assert_eq!(
        hook.client_config.ca_bundle.as_ref().unwrap().0,
        rotated.ca.current_pem().as_bytes()
    );
}

#[test]
fn service_and_pdb_select_the_initializer_pods() {
    let d = desired();
    let svc = d.service.spec.as_ref().unwrap();
    let port = &svc.ports.as_ref().unwrap()[0];
    assert_eq!(port.port, 443);
    assert_eq!(port.target_port, Some(IntOrString::String("https".into())));
    let pod_labels = d
        .deployment
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (k, v) in svc.selector.as_ref().unwrap() {
        assert_eq!(pod_labels.get(k), Some(v));
    }
    let pdb = d.pdb.spec.as_ref().unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(pdb.selector.as_ref().unwrap().match_labels, svc.selector);
}

#[test]
fn the_webhook_points_at_the_service_with_the_merged_selectors() {
    let d = desired();
    assert_eq!(
        d.webhook.metadata.name.as_deref(),
        Some("initializer-sidecar")
    );
    let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.name, "sidecar.initializers.initializer.dev");
    assert_eq!(hook.side_effects, "None");
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));
    assert_eq!(hook.timeout_seconds, Some(5));
    let svc = hook.client_config.service.as_ref().unwrap();
    assert_eq!(
        (svc.name.as_str(), svc.namespace.as_str()),
        ("sidecar", "initializer-system")
    );
    assert_eq!(
        (svc.path.as_deref(), svc.port),
        (Some(WEBHOOK_PATH), Some(443))
    );
    assert_eq!(
        hook.client_config.ca_bundle.as_ref().unwrap().0,
        TLS.ca.cert_pem.as_bytes()
    );
    let rule = &hook.rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["deployments".to_string()][..])
    );
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string()][..])
    );
    let ns = hook
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .clone()
        .unwrap();
    assert!(
        ns[0]
            .values
            .as_ref()
            .unwrap()
            .contains(&"initializer-system".to_string())
    );
    let obj = hook.object_selector.as_ref().unwrap();
    assert!(
        obj.match_expressions
            .iter()
            .flatten()
            .all(|r| r.key != EXCLUDE_LABEL)
    );
}

#[test]
fn the_degraded_configuration_fails_open_within_a_second_and_says_so() {
    let d = desired();
    assert!(!is_degraded(&d.webhook));
    let degraded = degraded(&d.webhook);
    assert!(is_degraded(&degraded));
    let hook = &degraded.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(hook.timeout_seconds, Some(1));
    let normal = &d.webhook.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.rules, normal.rules);
    assert_eq!(hook.namespace_selector, normal.namespace_selector);
    assert_eq!(degraded.metadata.name, d.webhook.metadata.name);
}

#[test]
fn the_fallback_matches_what_the_webhook_matches_and_denies() {
    assert!(desired().fallback.is_none());
    let example: initializer_crds::Initializer = serde_saphyr::from_str(include_str!(
        "../../../examples/secret-guard-initializer.yaml"
    ))
    .unwrap();
    let mut spec = example.spec;
    spec.annotation = Some(AnnotationGate {
        name: "guard.example/check".into(),
        required: true,
    });
    let v = validate(&spec, "initializer-system", "secret-guard").unwrap();
    let d = build(&v, &TLS, &settings(), None);
    let fallback = d.fallback.unwrap();
    let policy = fallback.policy.spec.unwrap();
    assert_eq!(
        fallback.policy.metadata.name.as_deref(),
        Some("initializer-secret-guard-fallback")
    );
    assert!(fallback.policy.metadata.namespace.is_none());
    assert_eq!(policy.failure_policy.as_deref(), Some("Fail"));
    let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
    let constraints = policy.match_constraints.unwrap();
    assert_eq!(constraints.namespace_selector, hook.namespace_selector);
    assert_eq!(constraints.object_selector, hook.object_selector);
    let rule = &constraints.resource_rules.unwrap()[0];
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["secrets".to_string()][..])
    );
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
    );
    let gate = &policy.match_conditions.unwrap()[0];
    assert!(
        gate.expression
            .contains("'guard.example/check' in object.metadata.annotations")
    );
    let validation = &policy.validations.unwrap()[0];
    assert!(validation.expression.contains(">= 27"));
    assert_eq!(validation.reason.as_deref(), Some("Invalid"));
    let binding = fallback.binding.spec;
    assert_eq!(binding.policy_name, "initializer-secret-guard-fallback");
    assert_eq!(binding.validation_actions, ["Deny"]);
}

#[test]
fn the_workload_generation_changes_only_with_the_pod_template() {
    let mut first = desired().deployment;
    let hash = template_hash(&first);
    assert_eq!(workload_generation(None, &hash, 1), 1);
    stamp_generation(&mut first, &hash, 1);
    // A later generation with the same template keeps the pods' generation.
    assert_eq!(workload_generation(Some(&first), &hash, 4), 1);
    let mut spec = sidecar().spec;
    spec.args.push("--verbose".into());
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    let changed = build(&v, &TLS, &settings(), None).deployment;
    let new_hash = template_hash(&changed);
    assert_ne!(new_hash, hash);
    assert_eq!(workload_generation(Some(&first), &new_hash, 5), 5);
    let env = pod_spec(&first).containers[0].env.clone().unwrap();
    let generation = env.iter().find(|e| e.name == GENERATION_ENV).unwrap();
    assert_eq!(generation.value.as_deref(), Some("1"));
}

#[test]
fn the_serving_certificate_names_the_service() {
    let d = desired();
    let info = tls::inspect(&TLS.cert_pem).unwrap();
    let svc = d.service.metadata.name.unwrap();
    let ns = d.service.metadata.namespace.unwrap();
    assert!(info.dns_names.contains(&format!("{svc}.{ns}.svc")));
}

fn legacy_desired() -> Desired {
    let mut spec = sidecar().spec;
    spec.backend = initializer_crds::Backend::InitializerConfiguration;
    spec.object_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("team".into(), "a".into())])),
        match_expressions: None,
    });
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    build(&v, &TLS, &settings(), Some(&owner()))
}

const PENDING: &str = "sidecar.initializer-system.initializer-operator.io";

#[test]
fn the_webhook_backend_builds_no_legacy_objects_and_runs_the_spec_args_alone() {
    let d = desired();
    assert!(d.legacy.is_none());
    let args = pod_spec(&d.deployment).containers[0].args.clone().unwrap();
    assert_eq!(args, sidecar().spec.args);
}

#[test]
fn the_legacy_backend_runs_the_initializer_as_a_controller_with_the_contract_args() {
    let d = legacy_desired();
    let pod = pod_spec(&d.deployment);
    let args = pod.containers[0].args.clone().unwrap();
    let value = |flag: &str| {
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1].clone()
    };
    assert_eq!(args[..2], ["--mode", "controller"]);
    assert_eq!(value("--pending-name"), PENDING);
    let rules: serde_json::Value = serde_json::from_str(&value("--rules")).unwrap();
    assert_eq!(
        rules,
        serde_json::json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}])
    );
    let namespaces: LabelSelector = serde_json::from_str(&value("--namespace-selector")).unwrap();
    assert_eq!(
        namespaces,
        d.webhook.webhooks.as_ref().unwrap()[0]
            .namespace_selector
            .clone()
            .unwrap(),
        "the same namespaces as the webhook would intercept"
    );
    let objects: LabelSelector = serde_json::from_str(&value("--object-selector")).unwrap();
    assert_eq!(objects.match_labels.unwrap()["team"], "a");
    assert!(
        args.ends_with(&sidecar().spec.args),
        "the spec's args come last: {args:?}"
    );
    assert_eq!(pod.automount_service_account_token, Some(true));
    assert_eq!(
        d.service_account.automount_service_account_token,
        Some(true)
    );
}

#[test]
fn the_legacy_configuration_names_the_pending_name_and_the_rules_without_operations() {
    let d = legacy_desired();
    let legacy = d.legacy.unwrap();
    assert_eq!(legacy.pending_name, PENDING);
    let configuration = serde_json::to_value(&legacy.configuration).unwrap();
    assert_eq!(
        configuration["apiVersion"],
        "admissionregistration.k8s.io/v1alpha1"
    );
    assert_eq!(configuration["kind"], "InitializerConfiguration");
    assert_eq!(configuration["metadata"]["name"], "initializer-sidecar");
    assert_eq!(
        configuration["metadata"]["labels"][INITIALIZER_LABEL],
        "sidecar"
    );
    assert!(configuration["metadata"].get("ownerReferences").is_none());
    assert_eq!(
        configuration["initializers"],
        serde_json::json!([{
            "name": PENDING,
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}],
        }])
    );
}

#[test]
fn the_controller_may_watch_and_update_what_it_initializes_and_list_namespaces_only() {
    let legacy = legacy_desired().legacy.unwrap();
    let role = &legacy.cluster_role;
    assert_eq!(
        role.metadata.name.as_deref(),
        Some("initializer-sidecar-controller")
    );
    assert_eq!(role.metadata.owner_references, Some(vec![owner()]));
    let rules = role.rules.as_ref().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].api_groups.as_deref().unwrap(), ["apps"]);
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["deployments"]);
    assert_eq!(
        rules[0].verbs,
        ["get", "list", "watch", "update", "initialize"]
    );
    assert_eq!(rules[1].resources.as_deref().unwrap(), ["namespaces"]);
    assert_eq!(rules[1].verbs, ["list", "watch"]);
    let binding = &legacy.cluster_role_binding;
    assert_eq!(binding.role_ref.name, "initializer-sidecar-controller");
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "sidecar", Some("initializer-system"))
    );
}

#[test]
fn a_found_configuration_says_which_names_and_rules_it_registers() {
    let legacy = legacy_desired().legacy.unwrap();
    let registered = legacy::registered(&legacy.configuration);
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].0, PENDING);
    assert_eq!(registered[0].1[0].resources, ["deployments"]);
    assert_eq!(registered[0].1[0].api_groups, ["apps"]);
}

#[test]
fn the_webhook_is_not_called_for_what_the_annotation_gate_leaves_alone() {
    let v = validated();
    let gate = v.spec.annotation.clone().unwrap();
    let conditions = |v: &Validated| webhook(v, "").webhooks.unwrap()[0].match_conditions.clone();
    assert_eq!(conditions(&v), Some(vec![gate_condition(&gate)]));
    // A degraded configuration keeps them: failing open changes when, not what, it is called.
    let degraded = degraded(&webhook(&v, ""));
    assert_eq!(
        degraded.webhooks.unwrap()[0].match_conditions,
        Some(vec![gate_condition(&gate)])
    );
    // An image reading a preset decides the rest in its own code: the gate alone.
    let mut custom = v.clone();
    custom.spec.preset = Some(PresetConfig::default());
    assert_eq!(conditions(&custom), Some(vec![gate_condition(&gate)]));
    let mut ungated = v.clone();
    ungated.spec.annotation = None;
    assert_eq!(conditions(&ungated), None);
}
