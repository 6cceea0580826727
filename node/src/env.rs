//! Container environment as the kubelet builds it: `envFrom`, `env` with literal values,
//! `fieldRef` (downward API), `secretKeyRef` and `configMapKeyRef`, and `$(VAR)` expansion.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, Secret, ServiceAccountTokenProjection,
};

/// Where a pod runs: what the downward API answers for `spec.nodeName`, `status.hostIP(s)` and
/// `status.podIP(s)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement<'a> {
    /// `spec.nodeName`.
    pub node_name: &'a str,
    /// `status.hostIP` and `status.hostIPs`.
    pub host_ip: &'a str,
    /// `status.podIP` and `status.podIPs`.
    pub pod_ip: &'a str,
}

/// Where Secrets, ConfigMaps and service-account tokens are read from.
pub trait Lookup: Send + Sync {
    /// A Secret, if it exists.
    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>>;
    /// A ConfigMap, if it exists.
    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>>;
    /// The token of a projected `serviceAccountToken` source: `Err` while it is not issued.
    /// By default a placeholder, for an API server without per-service-account identities
    /// (the sandbox).
    fn service_account_token(
        &self,
        _pod: &Pod,
        _source: &ServiceAccountTokenProjection,
    ) -> Result<Vec<u8>, String> {
        Ok(b"sandbox".to_vec())
    }
}

/// The value of a downward-API field path, or `None` when the node does not know it.
pub fn field_value(pod: &Pod, at: &Placement<'_>, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let keyed = |prefix: &str| -> Option<String> {
        path.strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")
            .map(str::to_owned)
    };
    if let Some(key) = keyed("metadata.labels") {
        return Some(
            meta.labels
                .as_ref()
                .and_then(|l| l.get(&key))
                .cloned()
                .unwrap_or_default(),
        );
    }
    if let Some(key) = keyed("metadata.annotations") {
        return Some(
            meta.annotations
                .as_ref()
                .and_then(|l| l.get(&key))
                .cloned()
                .unwrap_or_default(),
        );
    }
    let spec = pod.spec.as_ref();
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => at.node_name.into(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => at.pod_ip.into(),
        "status.hostIP" | "status.hostIPs" => at.host_ip.into(),
        _ => return None,
    })
}

/// `key="value"` lines, as the downward API writes label and annotation maps.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}\n"))
        .collect()
}

/// Expands `$(NAME)` references to variables defined in `env`; `$$` escapes a `$`; unknown
/// references stay as written, as in Kubernetes.
pub fn expand(input: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        })
}

fn config_map_value(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
        .or_else(|| {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        })
}

/// The container's environment, in definition order with later definitions winning, or the
/// message of a `CreateContainerConfigError` when a required Secret or ConfigMap is missing.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    at: &Placement<'_>,
    lookup: &dyn Lookup,
) -> Result<BTreeMap<String, String>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = BTreeMap::new();
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        if let Some(r) = &source.config_map_ref {
            match lookup.config_map(ns, &r.name) {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        env.insert(format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", r.name)),
            }
        }
        if let Some(r) = &source.secret_ref {
            match lookup.secret(ns, &r.name) {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        env.insert(
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret {:?} not found", r.name)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => expand(var.value.as_deref().unwrap_or_default(), &env),
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    match field_value(pod, at, &f.field_path) {
                        Some(v) => v,
                        None => return Err(format!("unsupported fieldPath {:?}", f.field_path)),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    match lookup.secret(ns, &r.name) {
                        Some(s) => match secret_value(&s, &r.key) {
                            Some(v) => v,
                            None if optional => continue,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in Secret {ns}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                        None if optional => continue,
                        None => return Err(format!("secret {:?} not found", r.name)),
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    match lookup.config_map(ns, &r.name) {
                        Some(cm) => match config_map_value(&cm, &r.key) {
                            Some(v) => v,
                            None if optional => continue,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in ConfigMap {ns}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                        None if optional => continue,
                        None => return Err(format!("configmap {:?} not found", r.name)),
                    }
                } else {
                    // resourceFieldRef: the node sets no resource limits.
                    String::new()
                }
            }
        };
        env.insert(var.name.clone(), value);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    struct One(Option<Arc<Secret>>);
    impl Lookup for One {
        fn secret(&self, _: &str, _: &str) -> Option<Arc<Secret>> {
            self.0.clone()
        }
        fn config_map(&self, _: &str, _: &str) -> Option<Arc<ConfigMap>> {
            None
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some([("app".to_owned(), "web".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(pod_ip: &str) -> Placement<'_> {
        Placement {
            node_name: "sandbox",
            host_ip: "127.0.0.1",
            pod_ip,
        }
    }

    #[test]
    fn downward_api_fields_resolve() {
        let p = pod();
        assert_eq!(
            field_value(&p, &at("127.1.0.3"), "status.podIP").as_deref(),
            Some("127.1.0.3")
        );
        assert_eq!(
            field_value(&p, &at(""), "status.hostIP").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            field_value(&p, &at(""), "metadata.name").as_deref(),
            Some("p")
        );
        assert_eq!(
            field_value(&p, &at(""), "metadata.namespace").as_deref(),
            Some("ns")
        );
        assert_eq!(
            field_value(&p, &at(""), "metadata.labels['app']").as_deref(),
            Some("web")
        );
        assert_eq!(
            field_value(&p, &at(""), "metadata.labels").as_deref(),
            Some("app=\"web\"\n")
        );
        assert_eq!(
            field_value(&p, &at(""), "spec.serviceAccountName").as_deref(),
            Some("default")
        );
        assert_eq!(
            field_value(&p, &at(""), "spec.nodeName").as_deref(),
            Some("sandbox")
        );
        assert_eq!(field_value(&p, &at(""), "status.nonsense"), None);
    }

    #[test]
    fn expansion_replaces_known_variables_and_keeps_unknown_ones() {
        let env: BTreeMap<String, String> = [("A".to_owned(), "1".to_owned())].into();
        assert_eq!(expand("x$(A)y$(B)z$$(A)$", &env), "x1y$(B)z$(A)$");
    }

    #[test]
    fn env_combines_literals_fields_and_secrets() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        let secret = Secret {
            data: Some([("token".to_owned(), ByteString(b"s3cret".to_vec()))].into()),
            ..Default::default()
        };
        c.env = Some(vec![
            EnvVar {
                name: "A".into(),
                value: Some("a".into()),
                ..Default::default()
            },
            field("POD_IP", "status.podIP"),
            EnvVar {
                name: "B".into(),
                value: Some("$(A)-$(POD_IP)".into()),
                ..Default::default()
            },
            EnvVar {
                name: "T".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "s".into(),
                        key: "token".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
        let env =
            container_env(&pod(), &c, &at("127.1.0.9"), &One(Some(Arc::new(secret)))).unwrap();
        assert_eq!(env["A"], "a");
        assert_eq!(env["POD_IP"], "127.1.0.9");
        assert_eq!(env["B"], "a-127.1.0.9");
        assert_eq!(env["T"], "s3cret");
        let err = container_env(&pod(), &c, &at("127.1.0.9"), &One(None)).unwrap_err();
        assert_eq!(err, "secret \"s\" not found");
    }
}
