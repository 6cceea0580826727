//! Container environment as the kubelet builds it: `envFrom`, `env` with literal values,
//! `fieldRef` and `resourceFieldRef` (downward API), `secretKeyRef` and `configMapKeyRef`, and
//! `$(VAR)` expansion.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, ResourceFieldSelector, Secret, ServiceAccountTokenProjection,
};

use crate::node_status::machine_capacity;

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
                } else if let Some(r) = &from.resource_field_ref {
                    resource_value(pod, container, r, machine_capacity())?
                } else {
                    String::new()
                }
            }
        };
        env.insert(var.name.clone(), value);
    }
    Ok(env)
}

/// A `resourceFieldRef`'s value as the kubelet gives it: the named container's request or limit
/// (a request not set is 0; a memory or CPU limit not set is the node's allocatable, here the
/// machine's), divided by the divisor (default 1) and rounded up, in whole milli-units for CPU
/// and whole units for the rest. `capacity` is the machine's CPUs and memory in KiB.
fn resource_value(
    pod: &Pod,
    container: &Container,
    selector: &ResourceFieldSelector,
    capacity: (usize, u64),
) -> Result<String, String> {
    let named = match selector.container_name.as_deref() {
        None | Some("") => container,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|spec| {
                spec.containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| format!("resourceFieldRef: no container named {name:?}"))?,
    };
    let unsupported = || format!("unsupported resourceFieldRef {:?}", selector.resource);
    let (kind, resource) = selector.resource.split_once('.').ok_or_else(unsupported)?;
    let set = named.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.as_ref(),
        "requests" => r.requests.as_ref(),
        _ => None,
    });
    if set.is_none() && !matches!(kind, "limits" | "requests") {
        return Err(unsupported());
    }
    let milli = match set.and_then(|m| m.get(resource)) {
        Some(quantity) => quantity_milli(&quantity.0)
            .ok_or_else(|| format!("unreadable quantity {:?}", quantity.0))?,
        None if kind == "requests" => 0,
        None => match resource {
            "cpu" => u128::try_from(capacity.0).unwrap_or(u128::MAX / 1000) * 1000,
            "memory" => u128::from(capacity.1) * 1024 * 1000,
            _ => return Err(unsupported()),
        },
    };
    // The API server stores an unset divisor as "0", which the kubelet reads as 1.
    let divisor = match &selector.divisor {
        Some(d) => match quantity_milli(&d.0) {
            Some(0) => 1000,
            Some(milli) => milli,
            None => return Err(format!("unreadable divisor {:?}", d.0)),
        },
        None => 1000,
    };
    let value = if resource == "cpu" {
        milli.div_ceil(divisor)
    } else {
        milli.div_ceil(1000).div_ceil(divisor.div_ceil(1000).max(1))
    };
    Ok(value.to_string())
}

/// A resource quantity in whole milli-units, rounded up (`256Mi`, `500m`, `1.5G`, `1e3`), as
/// Kubernetes' `MilliValue`; `None` when it does not parse or is negative.
fn quantity_milli(quantity: &str) -> Option<u128> {
    /// Binary suffixes as powers of 1024, decimal ones as powers of ten.
    const SUFFIXES: [(&str, u32, i32); 16] = [
        ("Ki", 1, 0),
        ("Mi", 2, 0),
        ("Gi", 3, 0),
        ("Ti", 4, 0),
        ("Pi", 5, 0),
        ("Ei", 6, 0),
        ("n", 0, -9),
        ("u", 0, -6),
        ("m", 0, -3),
        ("k", 0, 3),
        ("M", 0, 6),
        ("G", 0, 9),
        ("T", 0, 12),
        ("P", 0, 15),
        ("E", 0, 18),
        ("", 0, 0),
    ];
    let quantity = quantity.trim();
    SUFFIXES.iter().find_map(|&(suffix, binary, decimal)| {
        let number = quantity
            .strip_prefix('+')
            .unwrap_or(quantity)
            .strip_suffix(suffix)?;
        let (mantissa, exponent) = match number.split_once(['e', 'E']) {
            Some((m, e)) if suffix.is_empty() => (m, e.parse::<i32>().ok()?),
            Some(_) => return None,
            None => (number, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if whole.is_empty() && fraction.is_empty()
            || !whole
                .chars()
                .chain(fraction.chars())
                .all(|c| c.is_ascii_digit())
        {
            return None;
        }
        let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
        let digits = digits.checked_mul(1024u128.checked_pow(binary)?)?;
        // milli-units: three more powers of ten.
        let shift = exponent + decimal + 3 - i32::try_from(fraction.len()).ok()?;
        if shift >= 0 {
            digits.checked_mul(10u128.checked_pow(u32::try_from(shift).ok()?)?)
        } else {
            Some(digits.div_ceil(10u128.checked_pow(u32::try_from(-shift).ok()?)?))
        }
    })
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
    fn quantities_read_in_milli_units_with_binary_and_decimal_suffixes() {
        assert_eq!(quantity_milli("256Mi"), Some(268_435_456_000));
        assert_eq!(quantity_milli("1Gi"), Some(1_073_741_824_000));
        assert_eq!(quantity_milli("500m"), Some(500));
        assert_eq!(quantity_milli("1001m"), Some(1001));
        assert_eq!(quantity_milli("1.5G"), Some(1_500_000_000_000));
        assert_eq!(quantity_milli("1e3"), Some(1_000_000));
        assert_eq!(quantity_milli("2"), Some(2000));
        assert_eq!(
            quantity_milli("0.0001"),
            Some(1),
            "rounded up, as MilliValue"
        );
        assert_eq!(quantity_milli("1E"), Some(1_000_000_000_000_000_000_000));
        for bad in ["12Xi", "inf", "NaN", "-1", "", ".", "1.2.3", "1eMi"] {
            assert_eq!(quantity_milli(bad), None, "{bad}");
        }
    }

    #[test]
    fn resource_fields_give_the_limit_or_else_the_machines_capacity() {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let limited = Container {
            name: "initializer".into(),
            resources: Some(ResourceRequirements {
                limits: Some([("memory".to_owned(), Quantity("256Mi".into()))].into()),
                requests: Some([("cpu".to_owned(), Quantity("50m".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut pod = pod();
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![limited.clone()],
            ..Default::default()
        });
        let selector = |resource: &str, divisor: Option<&str>| ResourceFieldSelector {
            container_name: Some("initializer".into()),
            resource: resource.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
        };
        let capacity = (4, 8 * 1024 * 1024);
        let value = |resource, divisor| {
            resource_value(&pod, &limited, &selector(resource, divisor), capacity)
        };
        assert_eq!(value("limits.memory", None).as_deref(), Ok("268435456"));
        assert_eq!(value("limits.memory", Some("1Mi")).as_deref(), Ok("256"));
        assert_eq!(
            value("limits.memory", Some("0")).as_deref(),
            Ok("268435456")
        );
        // Rounded up, as the kubelet does: 50m of a core is 1 with the default divisor.
        assert_eq!(value("requests.cpu", None).as_deref(), Ok("1"));
        assert_eq!(value("requests.cpu", Some("1m")).as_deref(), Ok("50"));
        assert_eq!(value("requests.cpu", Some("7m")).as_deref(), Ok("8"));
        assert_eq!(value("limits.cpu", None).as_deref(), Ok("4"));
        assert_eq!(value("requests.memory", None).as_deref(), Ok("0"));
        assert!(value("limits.gpu", None).is_err());
        let mut elsewhere = selector("limits.memory", None);
        elsewhere.container_name = Some("missing".into());
        assert_eq!(
            resource_value(&pod, &limited, &elsewhere, capacity),
            Err("resourceFieldRef: no container named \"missing\"".to_string())
        );
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
