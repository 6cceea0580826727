//! Objects to feed both engines: Pods and every kind with a pod template, with and without
//! what a preset injects (containers of the same name, the preset's own and others, env vars,
//! mounts, volumes, labels and annotations already set, lists and maps missing altogether),
//! and a representative preset for them. Every object is valid for the API server, so the same
//! corpus serves the unit tests (webhook code against the interpreter) and the dry-run creates
//! on a real API server (webhook code against the policy); the canary check before a cutover
//! will create them too.
//!
//! The preset's items are written as the API server stores them: with the values it defaults
//! (`imagePullPolicy`, `terminationMessagePath`, `defaultMode`, ...) and the empty structs Go
//! always writes (`resources: {}`). The API server decodes and defaults what a policy or a
//! webhook adds after it is added, so a policy's stored result compared with the webhook's
//! result before that step would otherwise show those, and nothing else.

use initializer_crds::PresetConfig;
use serde_json::{Value, json};

/// One object of the corpus.
#[derive(Clone, Debug, PartialEq)]
pub struct CorpusObject {
    /// What it exercises (also its name: a DNS label).
    pub name: &'static str,
    /// The object, without a namespace.
    pub object: Value,
}

/// The label a preset selector of [`representative_preset`] refuses (objects carrying it are
/// left alone).
pub const OPT_OUT_LABEL: &str = "preset.example.com/opt-out";

/// A preset injecting one of everything, with strings that need escaping in CEL (quotes,
/// backslashes, line breaks, non-ASCII), selecting by label and namespace patterns.
pub fn representative_preset() -> PresetConfig {
    let preset = json!({
        "selector": {
            "labels": {"matchExpressions": [
                {"key": OPT_OUT_LABEL, "operator": "DoesNotExist"}
            ]},
            "namespaces": ["preset-*", "*-canary"]
        },
        "inject": {
            "containers": [{
                "name": "preset-proxy",
                "image": "registry.example/proxy:1.0",
                "imagePullPolicy": "IfNotPresent",
                "args": ["--greeting", "it's \"quoted\", back\\slashed\nand split", "--unicode=h\u{e9}llo \u{2713} \u{1F600}"],
                "ports": [{"name": "proxy", "containerPort": 15001, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File"
            }],
            "initContainers": [
                {
                    "name": "preset-log-shipper",
                    "image": "registry.example/shipper:1.0",
                    "imagePullPolicy": "IfNotPresent",
                    "restartPolicy": "Always",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                },
                {
                    "name": "preset-setup",
                    "image": "registry.example/setup:1.0",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "echo 'ready' > /shared/ready"],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                }
            ],
            "volumes": [
                {"name": "preset-shared", "emptyDir": {}},
                {"name": "preset-config", "configMap": {
                    "name": "preset-config", "defaultMode": 420,
                    "items": [{"key": "a", "path": "a.txt"}]
                }}
            ],
            "volumeMounts": [{"name": "preset-shared", "mountPath": "/shared"}],
            "env": [
                {"name": "PRESET_MODE", "value": "on"},
                {"name": "PRESET_NOTE", "value": "it's \"quoted\", back\\slashed\nand two lines\t\u{1}"},
                {"name": "PRESET_NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}
            ],
            "labels": {"preset.example.com/injected": "true", "tier": "preset"},
            "annotations": {"preset.example.com/note": "it's \"quoted\"\nback\\slash \u{2713}"}
        }
    });
    // A constant that is a valid PresetConfig by construction; the unit tests parse it.
    serde_json::from_value(preset).unwrap_or_default()
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": "registry.example/app:1.0"})
}

fn pod_spec(containers: Vec<Value>) -> Value {
    json!({"containers": containers, "restartPolicy": "Always"})
}

fn template(labels: Value, spec: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": spec})
}

fn object(kind: &str, api_version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// The corpus. Objects are valid as they are; with [`representative_preset`] each either gets
/// everything, gets what it lacks, or is left alone for a reason its name says.
pub fn corpus() -> Vec<CorpusObject> {
    let mut out = Vec::new();
    let mut push = |name: &'static str, object: Value| {
        let mut object = object;
        object["metadata"]["name"] = Value::String(name.to_owned());
        out.push(CorpusObject { name, object });
    };

    push(
        "pod-bare",
        object("Pod", "v1", "", pod_spec(vec![container("app")])),
    );
    push(
        "pod-no-volumes-no-token",
        object(
            "Pod",
            "v1",
            "",
            json!({
                "automountServiceAccountToken": false,
                "containers": [container("app"), container("worker")]
            }),
        ),
    );
    push(
        "pod-with-everything-of-its-own",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "labels": {"tier": "mine", "app": "web"},
                "annotations": {"preset.example.com/note": "mine", "other": "x"}
            },
            "spec": {
                "containers": [{
                    "name": "app", "image": "registry.example/app:1.0",
                    "env": [{"name": "PRESET_MODE", "value": "off"}, {"name": "OWN", "value": "1"}],
                    "volumeMounts": [{"name": "own", "mountPath": "/shared"}]
                }, {
                    "name": "second", "image": "registry.example/app:1.0",
                    "env": [{"name": "OWN", "value": "2"}]
                }],
                "volumes": [{"name": "own", "emptyDir": {}}, {"name": "preset-config", "emptyDir": {}}]
            }
        }),
    );
    push(
        "pod-with-init-containers-and-a-namesake",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"labels": {"app": "mesh"}},
            "spec": {
                "initContainers": [
                    {"name": "mesh", "image": "registry.example/mesh:1.0", "restartPolicy": "Always",
                     "env": [{"name": "MESH", "value": "1"}]},
                    {"name": "migrate", "image": "registry.example/migrate:1.0"},
                    {"name": "preset-setup", "image": "registry.example/own-setup:1.0"}
                ],
                "containers": [
                    container("app"),
                    {"name": "preset-proxy", "image": "registry.example/own-proxy:1.0",
                     "env": [{"name": "MINE", "value": "1"}]}
                ]
            }
        }),
    );
    // The preset's container as the API server stores it, with more than the preset sets (a
    // LimitRange's limits, its own variable): it is the preset's, and stays as it is.
    push(
        "pod-with-the-injected-container-and-more",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "spec": {
                "containers": [
                    container("app"),
                    {"name": "preset-proxy", "image": "registry.example/proxy:1.0",
                     "imagePullPolicy": "IfNotPresent",
                     "args": ["--greeting", "it's \"quoted\", back\\slashed\nand split",
                              "--unicode=h\u{e9}llo \u{2713} \u{1F600}"],
                     "ports": [{"name": "proxy", "containerPort": 15001, "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                   "limits": {"cpu": "1", "memory": "64Mi"}},
                     "env": [{"name": "OWN", "value": "1"}],
                     "terminationMessagePath": "/dev/termination-log",
                     "terminationMessagePolicy": "File"}
                ]
            }
        }),
    );
    push(
        "pod-opted-out-by-label",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"labels": {OPT_OUT_LABEL: "yes"}},
            "spec": pod_spec(vec![container("app")])
        }),
    );
    push(
        "deployment-plain",
        object(
            "Deployment",
            "apps/v1",
            "",
            json!({
                "selector": {"matchLabels": {"app": "d"}},
                "template": template(json!({"app": "d"}), pod_spec(vec![container("app")]))
            }),
        ),
    );
    push(
        "deployment-with-volumes-env-and-template-annotations",
        object(
            "Deployment",
            "apps/v1",
            "",
            json!({
                "replicas": 2,
                "selector": {"matchLabels": {"app": "d2"}},
                "template": {
                    "metadata": {"labels": {"app": "d2", "tier": "web"},
                                 "annotations": {"prometheus.io/scrape": "true"}},
                    "spec": {
                        "containers": [
                            {"name": "app", "image": "registry.example/app:1.0",
                             "env": [{"name": "A", "value": "1"}],
                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                            {"name": "sidecar", "image": "registry.example/side:1.0"}
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}]
                    }
                }
            }),
        ),
    );
    push(
        "statefulset",
        object(
            "StatefulSet",
            "apps/v1",
            "",
            json!({
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": template(json!({"app": "db"}), pod_spec(vec![container("db")]))
            }),
        ),
    );
    push(
        "daemonset",
        object(
            "DaemonSet",
            "apps/v1",
            "",
            json!({
                "selector": {"matchLabels": {"app": "agent"}},
                "template": template(json!({"app": "agent"}), pod_spec(vec![container("agent")]))
            }),
        ),
    );
    push(
        "replicaset",
        object(
            "ReplicaSet",
            "apps/v1",
            "",
            json!({
                "selector": {"matchLabels": {"app": "rs"}},
                "template": template(json!({"app": "rs"}), pod_spec(vec![container("app")]))
            }),
        ),
    );
    push(
        "job-without-template-labels",
        object(
            "Job",
            "batch/v1",
            "",
            json!({"template": {"spec": {
                "containers": [container("task")], "restartPolicy": "Never"
            }}}),
        ),
    );
    push(
        "job-with-env-and-mounts",
        object(
            "Job",
            "batch/v1",
            "",
            json!({"template": {
                "metadata": {"labels": {"tier": "batch"}},
                "spec": {
                    "containers": [{"name": "task", "image": "registry.example/task:1.0",
                        "env": [{"name": "PRESET_NOTE", "value": "mine"}],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "restartPolicy": "OnFailure"
                }
            }}),
        ),
    );
    push(
        "cronjob",
        object(
            "CronJob",
            "batch/v1",
            "",
            json!({
                "schedule": "*/5 * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [container("report")], "restartPolicy": "Never"
                }}}}
            }),
        ),
    );
    push(
        "cronjob-with-init-containers-and-volumes",
        object(
            "CronJob",
            "batch/v1",
            "",
            json!({
                "schedule": "0 * * * *",
                "jobTemplate": {
                    "metadata": {"labels": {"team": "reports"}},
                    "spec": {"template": {
                        "metadata": {"annotations": {"note": "mine"}},
                        "spec": {
                            "initContainers": [{"name": "fetch", "image": "registry.example/fetch:1.0",
                                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}],
                            "containers": [{"name": "report", "image": "registry.example/report:1.0",
                                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}],
                            "volumes": [{"name": "in", "emptyDir": {}}],
                            "restartPolicy": "OnFailure"
                        }
                    }}
                }
            }),
        ),
    );
    out
}
