//! Defaults the real API server fills in for built-in kinds, limited to the fields our code and
//! kubectl read back (protocols, target ports, replicas, strategies, webhook policies).

use serde_json::{Value, json};

/// Whether objects of a kind carry `metadata.generation`, as kube-apiserver's strategies set it:
/// custom resources and the built-ins whose spec changes are observed by a controller.
pub fn has_generation(group: &str, kind: &str, custom: bool) -> bool {
    custom
        || matches!(
            (group, kind),
            ("", "Pod")
                | ("apps", _)
                | ("discovery.k8s.io", "EndpointSlice")
                | ("policy", "PodDisruptionBudget")
                | ("admissionregistration.k8s.io", _)
                | ("apiextensions.k8s.io", "CustomResourceDefinition")
        )
}

fn set_if_absent(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(v);
    }
}

fn default_containers(spec: &mut Value) {
    for field in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(field).and_then(Value::as_array_mut) {
            for c in cs {
                set_if_absent(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_if_absent(c, "terminationMessagePolicy", json!("File"));
                let latest = c
                    .get("image")
                    .and_then(Value::as_str)
                    .is_some_and(|i| !i.rsplit('/').next().unwrap_or("").contains(':'));
                set_if_absent(
                    c,
                    "imagePullPolicy",
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        set_if_absent(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

fn default_pod_spec(spec: &mut Value) {
    set_if_absent(spec, "restartPolicy", json!("Always"));
    set_if_absent(spec, "terminationGracePeriodSeconds", json!(30));
    set_if_absent(spec, "dnsPolicy", json!("ClusterFirst"));
    set_if_absent(spec, "schedulerName", json!("default-scheduler"));
    set_if_absent(spec, "securityContext", json!({}));
    default_containers(spec);
}

/// Fills defaults into `obj` of `group`/`kind`.
pub fn apply(group: &str, kind: &str, obj: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
                if spec.get("serviceAccountName").is_none() {
                    set_if_absent(spec, "serviceAccountName", json!("default"));
                }
            }
        }
        ("", "Service") => {
            let Some(spec) = obj.get_mut("spec") else {
                return;
            };
            set_if_absent(spec, "type", json!("ClusterIP"));
            set_if_absent(spec, "sessionAffinity", json!("None"));
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_if_absent(p, "protocol", json!("TCP"));
                    if let Some(port) = p.get("port").cloned() {
                        set_if_absent(p, "targetPort", port);
                    }
                }
            }
        }
        ("apps", "Deployment" | "ReplicaSet") => {
            let Some(spec) = obj.get_mut("spec") else {
                return;
            };
            set_if_absent(spec, "replicas", json!(1));
            set_if_absent(spec, "revisionHistoryLimit", json!(10));
            if kind == "Deployment" {
                set_if_absent(spec, "progressDeadlineSeconds", json!(600));
                set_if_absent(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
            }
            if let Some(tspec) = spec.pointer_mut("/template/spec") {
                default_pod_spec(tspec);
            }
        }
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => {
            let mutating = kind.starts_with("Mutating");
            if let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) {
                for h in hooks {
                    set_if_absent(h, "failurePolicy", json!("Fail"));
                    set_if_absent(h, "matchPolicy", json!("Equivalent"));
                    set_if_absent(h, "namespaceSelector", json!({}));
                    set_if_absent(h, "objectSelector", json!({}));
                    set_if_absent(h, "timeoutSeconds", json!(10));
                    if mutating {
                        set_if_absent(h, "reinvocationPolicy", json!("Never"));
                    }
                    if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
                        for r in rules {
                            set_if_absent(r, "scope", json!("*"));
                        }
                    }
                    if let Some(svc) = h.pointer_mut("/clientConfig/service") {
                        set_if_absent(svc, "port", json!(443));
                    }
                }
            }
        }
        ("", "Secret") => set_if_absent(obj, "type", json!("Opaque")),
        ("policy", "PodDisruptionBudget") => {}
        _ => {}
    }
}

/// The status a new object starts with, for kinds with a status subresource.
pub fn initial_status(group: &str, kind: &str) -> Option<Value> {
    match (group, kind) {
        ("", "Pod") => Some(json!({"phase": "Pending", "qosClass": "BestEffort"})),
        ("", "Namespace") => Some(json!({"phase": "Active"})),
        ("", "Service") => Some(json!({"loadBalancer": {}})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ports_get_protocol_and_target_port() {
        let mut svc = json!({"spec": {"ports": [{"port": 443}]}});
        apply("", "Service", &mut svc);
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 443, "protocol": "TCP", "targetPort": 443})
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
    }

    #[test]
    fn webhooks_get_the_api_server_defaults() {
        let mut cfg = json!({"webhooks": [{"name": "a", "rules": [{}]}]});
        apply(
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
            &mut cfg,
        );
        assert_eq!(cfg["webhooks"][0]["failurePolicy"], "Fail");
        assert_eq!(cfg["webhooks"][0]["rules"][0]["scope"], "*");
        assert_eq!(cfg["webhooks"][0]["reinvocationPolicy"], "Never");
    }
}
