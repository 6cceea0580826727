//! The chart generator's unit tests: holes, defaults, values and rendering.

use initializer_crds::images::Pin;
use serde_json::{Value, json};

use super::values::wrap;
use super::*;

const NS: &str = "ops";

fn bundle() -> Bundle {
    super::super::generate().unwrap()
}

/// The plan's objects for `NS`, as JSON, without the installer's label, by template file.
fn plan_objects() -> Vec<(String, Value)> {
    let plan = install::plan(&bundle(), NS).unwrap();
    let mut objects = Vec::new();
    let mut push = |file: &str, object: Value| objects.push((file.to_string(), object));
    let strip = |object: &dyn erased::Json| {
        let mut value = object.json();
        if let Some(labels) = value
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.remove(MANAGED_BY_LABEL);
        }
        value
    };
    for crd in &plan.crds {
        let mut crd = strip(crd);
        crd["metadata"]["annotations"] = json!({RESOURCE_POLICY_ANNOTATION: "keep"});
        push(CRD_FILE, crd);
    }
    plan.service_accounts
        .iter()
        .for_each(|o| push("serviceaccount.yaml", strip(o)));
    plan.cluster_roles
        .iter()
        .for_each(|o| push("clusterrole.yaml", strip(o)));
    plan.cluster_role_bindings
        .iter()
        .for_each(|o| push("clusterrolebinding.yaml", strip(o)));
    plan.roles.iter().for_each(|o| push("role.yaml", strip(o)));
    plan.role_bindings
        .iter()
        .for_each(|o| push("rolebinding.yaml", strip(o)));
    plan.bundle_cluster_roles.iter().for_each(|o| {
        push(
            super::objects::bundle_role_template(o.metadata.name.as_deref().unwrap_or_default()),
            strip(o),
        )
    });
    plan.deployments
        .iter()
        .for_each(|o| push("deployment.yaml", strip(o)));
    plan.pod_disruption_budgets
        .iter()
        .for_each(|o| push("poddisruptionbudget.yaml", strip(o)));
    plan.services
        .iter()
        .for_each(|o| push("metrics-service.yaml", strip(o)));
    for object in &plan.monitoring {
        let file = match object["kind"].as_str().unwrap() {
            "ServiceMonitor" => "servicemonitor.yaml",
            _ => "prometheusrule.yaml",
        };
        push(file, strip(object));
    }
    objects
}

mod erased {
    pub trait Json {
        fn json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}

fn filled_objects() -> Vec<(String, Value)> {
    let plan = install::plan(&bundle(), &namespace_token()).unwrap();
    let defaults = Defaults::from_plan(&plan).unwrap();
    template_objects(&plan)
        .unwrap()
        .into_iter()
        .map(|t| {
            let filled = fill_holes(&t.object, &|hole| defaults.fill(hole, NS));
            (t.file, fill_parameters(&filled, &|p| p.default.clone()))
        })
        .collect()
}

#[test]
fn the_chart_filled_with_its_defaults_gives_every_object_of_the_install_plan() {
    let (hooks, objects): (Vec<_>, Vec<_>) = filled_objects()
        .into_iter()
        .partition(|(file, _)| file == GUARD_HOOK_FILE);
    assert_eq!(objects, plan_objects());
    assert_eq!(hooks.len(), 4, "{hooks:?}");
}

#[test]
fn the_guard_hook_runs_before_the_crd_in_the_operators_image_with_rights_to_the_guard_only() {
    let filled = filled_objects();
    let (_, operator) = filled
        .iter()
        .find(|(file, _)| file == "deployment.yaml")
        .unwrap();
    let hooks: Vec<&Value> = filled
        .iter()
        .filter(|(file, _)| file == GUARD_HOOK_FILE)
        .map(|(_, object)| object)
        .collect();
    let kinds: Vec<&str> = hooks.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"]
    );
    for hook in &hooks {
        let annotations = &hook["metadata"]["annotations"];
        // Helm creates `crds/` before any hook: the CRD must be a template to come after it.
        assert_eq!(
            annotations["helm.sh/hook"],
            json!("pre-install,pre-upgrade"),
            "{hook}"
        );
        // The rights never outlive the hook; a failed Job stays for its log.
        let policy = if hook["kind"] == "Job" {
            "before-hook-creation,hook-succeeded"
        } else {
            "before-hook-creation,hook-succeeded,hook-failed"
        };
        assert_eq!(annotations["helm.sh/hook-delete-policy"], json!(policy));
        assert_eq!(hook["metadata"]["name"], json!(GUARD_HOOK_NAME));
    }
    // The Job's weight is the highest: its account and rights exist before it runs.
    assert_eq!(
        hooks[3]["metadata"]["annotations"]["helm.sh/hook-weight"],
        json!("0")
    );
    assert_eq!(
        hooks[0]["metadata"]["annotations"]["helm.sh/hook-weight"],
        json!("-10")
    );
    assert_eq!(
        hooks[1]["rules"],
        json!([{
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            "resourceNames": [manifest::GUARD_NAME],
            "verbs": ["get", "patch", "create"],
        }])
    );
    assert_eq!(hooks[2]["subjects"][0]["namespace"], json!(NS));
    let job_pod = &hooks[3]["spec"]["template"]["spec"];
    let operator_pod = &operator["spec"]["template"]["spec"];
    assert_eq!(job_pod["serviceAccountName"], json!(GUARD_HOOK_NAME));
    assert_eq!(job_pod["securityContext"], operator_pod["securityContext"]);
    let (job, operator) = (&job_pod["containers"][0], &operator_pod["containers"][0]);
    assert_eq!(job["args"], json!([GUARD_SUBCOMMAND]));
    for field in ["image", "imagePullPolicy", "resources", "securityContext"] {
        assert_eq!(job[field], operator[field], "{field}");
    }
    assert_eq!(
        hooks[3]["spec"]["template"]["metadata"]["labels"][constants::EXCLUDE_LABEL],
        json!("true"),
    );
}

#[test]
fn the_charts_deployment_filled_with_its_defaults_is_the_csvs_deployment_spec() {
    let csv = super::super::generate::cluster_service_version(
        crate::rbac::cluster_rules(),
        crate::rbac::namespace_rules(),
    )
    .unwrap();
    let from_csv = serde_json::to_value(&csv.spec.install.spec.deployments[0].spec).unwrap();
    let (_, deployment) = filled_objects()
        .into_iter()
        .find(|(file, _)| file == "deployment.yaml")
        .unwrap();
    assert_eq!(deployment["spec"], from_csv);
    assert_eq!(deployment["metadata"]["namespace"], json!(NS));
}

#[test]
fn the_deployment_has_a_hole_for_every_value_and_no_object_keeps_the_installers_label() {
    let plan = install::plan(&bundle(), &namespace_token()).unwrap();
    let text: String = template_objects(&plan)
        .unwrap()
        .iter()
        .map(|t| serde_json::to_string(&t.object).unwrap())
        .collect();
    for hole in HOLES {
        assert!(text.contains(&hole.token()), "{hole:?} is never opened");
    }
    assert!(!text.contains(install::MANAGED_BY_VALUE));
}

#[test]
fn defaults_are_read_from_the_csvs_deployment() {
    let plan = install::plan(&bundle(), NS).unwrap();
    let defaults = Defaults::from_plan(&plan).unwrap();
    assert_eq!(defaults.replicas, manifest::REPLICAS);
    assert_eq!(defaults.metrics_port, manifest::HTTP_PORT);
    assert_eq!(
        defaults.image.to_string(),
        initializer_crds::images::image(initializer_crds::images::OPERATOR)
    );
    assert_eq!(defaults.image.pin, Pin::Tag(APP_VERSION.to_string()));
    assert_eq!(defaults.pull_policy, "IfNotPresent");
    assert_eq!(defaults.log_level, "info");
    assert_eq!(defaults.resources["requests"]["cpu"], json!("50m"));
}

#[test]
fn a_plan_without_the_operators_deployment_is_refused_with_its_name() {
    let mut plan = install::plan(&bundle(), NS).unwrap();
    plan.deployments.clear();
    let err = Defaults::from_plan(&plan).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "failed to generate the Helm chart: failed to find the Deployment initializer-operator"
        ),
        "{err}"
    );
}

#[test]
fn holes_become_template_text_at_the_indentation_of_their_line() {
    let object = json!({
        "metadata": {"labels": {Hole::Labels.token(): "", "a": "b"}, "namespace": Hole::Namespace.token()},
        "spec": {"replicas": Hole::Replicas.token(), "env": [{"name": "X"}, Hole::LogFormat.token()], "resources": Hole::Resources.token()},
    });
    let text = render_template(&object).unwrap();
    let expected = "metadata:
  labels:
    {{- include \"initializer-operator.labels\" . | nindent 4 }}
    a: b
  namespace: {{ include \"initializer-operator.namespace\" . }}
spec:
  env:
  - name: X
  {{- if eq .Values.logFormat \"json\" }}
  - name: LOG_JSON
    value: \"true\"
  {{- end }}
  replicas: {{ int .Values.replicas }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
";
    assert_eq!(text, expected);
}

#[test]
fn literal_template_braces_are_escaped_and_an_unknown_hole_is_refused() {
    let text = render_template(&json!({"a": "x {{ $labels.y }}"})).unwrap();
    assert_eq!(text, "a: x {{ \"{{\" }} $labels.y }}\n");
    let unknown = render_template(&json!({"a": "@@Nothing@@"})).unwrap_err();
    assert!(
        unknown.to_string().contains("a hole was left open"),
        "{unknown}"
    );
}

#[test]
fn filling_a_key_hole_merges_entries_and_a_list_hole_splices_items() {
    let object =
        json!({"m": {Hole::Labels.token(): "", "a": 1}, "l": [1, Hole::LogFormat.token(), 2]});
    let filled = fill_holes(&object, &|hole| match hole {
        Hole::Labels => json!({"z": 2}),
        Hole::LogFormat => json!([7, 8]),
        _ => json!(null),
    });
    assert_eq!(filled, json!({"m": {"a": 1, "z": 2}, "l": [1, 7, 8, 2]}));
}

#[test]
fn the_committed_chart_yaml_reads_back_as_its_metadata() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(CHART_DIR)
        .join("Chart.yaml");
    let read: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(read, super::files::chart_metadata());
}

#[test]
fn values_yaml_holds_every_default_and_the_schema_describes_every_value() {
    let chart = generate().unwrap();
    let values: Value = serde_saphyr::from_str(chart.file("values.yaml").unwrap()).unwrap();
    let schema: Value = serde_json::from_str(chart.file("values.schema.json").unwrap()).unwrap();
    let plan = install::plan(&bundle(), NS).unwrap();
    let fields = super::values(&Defaults::from_plan(&plan).unwrap());
    let leaves = leaves(&fields);
    assert!(leaves.len() >= 14, "{leaves:?}");
    for (path, default, doc) in leaves {
        let pointer = format!("/{}", path.replace('.', "/"));
        assert_eq!(
            values.pointer(&pointer),
            Some(&default),
            "{path} in values.yaml"
        );
        let property = format!("/properties/{}", path.replace('.', "/properties/"));
        let described = schema
            .pointer(&property)
            .unwrap_or_else(|| panic!("{path} in the schema"));
        assert_eq!(described["default"], default, "{path}");
        assert_eq!(described["description"], json!(doc), "{path}");
        assert!(
            chart
                .file("README.md")
                .unwrap()
                .contains(&format!("| `{path}` |"))
        );
    }
    assert_eq!(schema["additionalProperties"], json!(false));
}

#[test]
fn every_template_is_marked_generated() {
    let chart = generate().unwrap();
    assert!(chart.file(&format!("templates/{CRD_FILE}")).is_some());
    for (name, text) in &chart.files {
        if name.ends_with(".yaml") {
            assert!(text.starts_with(GENERATED_HEADER), "{name}");
        }
    }
}

#[test]
fn a_written_chart_replaces_stale_templates_and_keeps_other_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("templates")).unwrap();
    // A template an earlier run generated, since renamed.
    std::fs::write(
        dir.path().join("templates/old.yaml"),
        format!("{GENERATED_HEADER}\nx\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join(".helmignore"), "kept").unwrap();
    let chart = generate().unwrap();
    chart.write(dir.path()).unwrap();
    assert!(!dir.path().join("templates/old.yaml").exists());
    assert!(dir.path().join(".helmignore").exists());
    for (name, text) in &chart.files {
        assert_eq!(
            &std::fs::read_to_string(dir.path().join(name)).unwrap(),
            text
        );
    }
}

#[test]
fn a_chart_refuses_to_replace_or_remove_files_it_did_not_generate() {
    let chart = generate().unwrap();
    // A developer's own chart file where ours goes, and one of theirs among the templates.
    for (foreign, text) in [
        ("Chart.yaml", "apiVersion: v2\nname: mine\n"),
        ("templates/mine.yaml", "kind: ConfigMap\n"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(foreign);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let err = chart.write(dir.path()).unwrap_err().to_string();
        assert!(err.contains(foreign), "{foreign}: {err}");
        assert!(err.contains("did not generate"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{foreign}");
        assert!(
            !dir.path().join("values.yaml").exists(),
            "nothing is written when a file is refused"
        );
    }
}

#[test]
fn long_descriptions_wrap_at_word_boundaries() {
    assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
    assert_eq!(wrap("toolongword x", 4), vec!["toolongword", "x"]);
    assert!(wrap("", 10).is_empty());
}
