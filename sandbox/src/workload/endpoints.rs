//! The EndpointSlice controller: one slice per Service with a selector, listing the selected pods
//! that have an address, `ready` following each pod's Ready condition.

use std::collections::HashSet;
use std::sync::Arc;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::NODE_NAME;
use super::cache::{Caches, wait_for_change};
use crate::proxy::SERVICE_NAME_LABEL;
use crate::selector;

/// `endpointslice.kubernetes.io/managed-by`.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The value the real controller uses, so tools that look for it find ours.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

fn short_hash(s: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{:05x}", h & 0xfffff)
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container_port(pod: &Pod, name: &str) -> Option<i32> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| p.container_port)
}

/// The slice the Service should have (as JSON), or `None` for a Service without a selector.
pub fn desired(service: &Service, pods: &[Arc<Pod>]) -> Option<Value> {
    let spec = service.spec.as_ref()?;
    let sel = spec.selector.clone().unwrap_or_default();
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    if sel.is_empty() {
        return None;
    }
    let ns = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();
    let mut selected: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|p| selector::map_selects(&sel, &p.metadata.labels.clone().unwrap_or_default()))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| !ip.is_empty())
        })
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    selected.sort_by_key(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()));
    let ports: Vec<Value> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let target = match &p.target_port {
                None => Some(p.port),
                Some(IntOrString::Int(n)) => Some(*n),
                Some(IntOrString::String(s)) => selected.iter().find_map(|pod| container_port(pod, s)).or_else(|| s.parse().ok()),
            }?;
            let mut port = json!({"port": target, "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into())});
            port["name"] = json!(p.name.clone().unwrap_or_default());
            if let Some(app) = &p.app_protocol {
                port["appProtocol"] = json!(app);
            }
            Some(port)
        })
        .collect();
    let endpoints: Vec<Value> = selected
        .iter()
        .map(|p| {
            let terminating = p.metadata.deletion_timestamp.is_some();
            // publishNotReadyAddresses: every address counts as ready, as in the real controller.
            let ready = (pod_ready(p) || publish_not_ready) && !terminating;
            json!({
                "addresses": [p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()],
                "conditions": {"ready": ready, "serving": pod_ready(p), "terminating": terminating},
                "targetRef": {"kind": "Pod", "namespace": ns, "name": p.metadata.name, "uid": p.metadata.uid},
                "nodeName": NODE_NAME,
            })
        })
        .collect();
    Some(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{name}-{}", short_hash(&uid)),
            "namespace": ns,
            "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }))
}

/// The v1 Endpoints object mirroring a desired slice: ready addresses, not-ready addresses,
/// ports. Named like the Service and owned by it.
pub fn desired_endpoints(service: &Service, slice: &Value) -> Value {
    let address = |e: &Value| json!({"ip": e["addresses"][0], "nodeName": e["nodeName"], "targetRef": e["targetRef"]});
    let endpoints = slice["endpoints"].as_array().cloned().unwrap_or_default();
    let ready: Vec<Value> = endpoints
        .iter()
        .filter(|e| e["conditions"]["ready"] == true)
        .map(address)
        .collect();
    let not_ready: Vec<Value> = endpoints
        .iter()
        .filter(|e| e["conditions"]["ready"] != true)
        .map(address)
        .collect();
    let mut subset = serde_json::Map::new();
    if !ready.is_empty() {
        subset.insert("addresses".into(), json!(ready));
    }
    if !not_ready.is_empty() {
        subset.insert("notReadyAddresses".into(), json!(not_ready));
    }
    subset.insert("ports".into(), slice["ports"].clone());
    let subsets = if ready.is_empty() && not_ready.is_empty() {
        json!([])
    } else {
        json!([subset])
    };
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": service.metadata.name,
            "namespace": service.metadata.namespace,
            "labels": service.metadata.labels.clone().unwrap_or_default(),
            "ownerReferences": slice["metadata"]["ownerReferences"],
        },
        "subsets": subsets,
    })
}

/// Whether the stored slice already says what `wanted` says.
fn same(stored: &EndpointSlice, wanted: &Value) -> bool {
    let Ok(stored) = serde_json::to_value(stored) else {
        return false;
    };
    // Round-trip through the typed object so absent and null fields compare equal.
    let Ok(wanted) =
        serde_json::from_value::<EndpointSlice>(wanted.clone()).and_then(serde_json::to_value)
    else {
        return false;
    };
    let wanted = &wanted;
    let norm = |v: &Value| v.as_array().cloned().unwrap_or_default();
    norm(&stored["endpoints"]) == norm(&wanted["endpoints"])
        && norm(&stored["ports"]) == norm(&wanted["ports"])
        && stored["metadata"]["labels"][SERVICE_NAME_LABEL]
            == wanted["metadata"]["labels"][SERVICE_NAME_LABEL]
}

fn managed(slice: &EndpointSlice) -> bool {
    slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        == Some(MANAGED_BY)
}

/// Creates `wanted` or replaces `existing` with it; `Ok(false)` when nothing needed writing.
async fn write<K>(
    api: &Api<K>,
    existing: Option<&K>,
    wanted: Value,
    same: impl Fn(&K, &Value) -> bool,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    if existing.is_some_and(|e| same(e, &wanted)) {
        return Ok(false);
    }
    let mut body = wanted;
    if let Some(e) = existing {
        body["metadata"]["resourceVersion"] = json!(e.meta().resource_version);
    }
    let obj: K = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
    let name = obj.meta().name.clone().unwrap_or_default();
    match existing {
        Some(_) => api.replace(&name, &PostParams::default(), &obj).await?,
        None => api.create(&PostParams::default(), &obj).await?,
    };
    Ok(true)
}

fn same_endpoints(stored: &Endpoints, wanted: &Value) -> bool {
    let Ok(wanted) = serde_json::from_value::<Endpoints>(wanted.clone()) else {
        return false;
    };
    let norm =
        |s: &Option<Vec<k8s_openapi::api::core::v1::EndpointSubset>>| s.clone().unwrap_or_default();
    norm(&stored.subsets) == norm(&wanted.subsets)
        && stored.metadata.labels.clone().unwrap_or_default()
            == wanted.metadata.labels.unwrap_or_default()
}

/// Runs the controller until `shutdown`.
pub async fn run(client: Client, caches: Caches, shutdown: CancellationToken) {
    let mut changes = caches.subscribe();
    loop {
        let pods = caches.pods.state();
        let slices = caches.endpoint_slices.state();
        let all_endpoints = caches.endpoints.state();
        let mut retry = false;
        let mut wanted_names: HashSet<(String, String)> = HashSet::new();
        for service in caches.services.state() {
            let Some(wanted) = desired(&service, &pods) else {
                continue;
            };
            let ns = service.metadata.namespace.clone().unwrap_or_default();
            let name = wanted["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            wanted_names.insert((ns.clone(), name.clone()));
            let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
            let existing = slices.iter().find(|s| {
                s.metadata.namespace.as_deref() == Some(ns.as_str())
                    && s.metadata.name.as_deref() == Some(name.as_str())
            });
            let endpoints = desired_endpoints(&service, &wanted);
            if let Err(e) = write(&api, existing.map(AsRef::as_ref), wanted, same).await {
                // A conflict resolves itself on the next change; retry soon in any case.
                tracing::debug!(slice = %format!("{ns}/{name}"), error = %e, "failed to write endpointslice");
                retry = true;
            }
            let svc_name = service.metadata.name.clone().unwrap_or_default();
            let api: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
            let existing = all_endpoints.iter().find(|e| {
                e.metadata.namespace.as_deref() == Some(ns.as_str())
                    && e.metadata.name.as_deref() == Some(svc_name.as_str())
            });
            if let Err(e) =
                write(&api, existing.map(AsRef::as_ref), endpoints, same_endpoints).await
            {
                tracing::debug!(endpoints = %format!("{ns}/{svc_name}"), error = %e, "failed to write endpoints");
                retry = true;
            }
        }
        for slice in slices.iter().filter(|s| managed(s)) {
            let ns = slice.metadata.namespace.clone().unwrap_or_default();
            let name = slice.metadata.name.clone().unwrap_or_default();
            if !wanted_names.contains(&(ns.clone(), name.clone())) {
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
                if let Err(e) = api.delete(&name, &DeleteParams::default()).await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::debug!(slice = %format!("{ns}/{name}"), error = %e, "failed to delete endpointslice");
                }
            }
        }
        let backoff = if retry {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(3600)
        };
        if !wait_for_change(&mut changes, &shutdown, backoff).await {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerPort, PodCondition, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("a".into()),
                uid: Some("s-uid".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_owned(), "web".to_owned())].into()),
                ports: Some(vec![ServicePort {
                    name: Some("https".into()),
                    port: 443,
                    target_port: Some(IntOrString::String("https".into())),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ip: &str, ready: bool, app: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("a".into()),
                labels: Some([("app".to_owned(), app.to_owned())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("https".into()),
                        container_port: 8443,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                pod_ip: Some(ip.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn slice_lists_selected_pods_with_readiness_and_resolved_ports() {
        let s = desired(
            &service(),
            &[
                pod("p1", "127.1.0.2", true, "web"),
                pod("p2", "127.1.0.1", false, "web"),
                pod("x", "127.1.0.3", true, "other"),
            ],
        )
        .unwrap();
        assert_eq!(s["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        assert_eq!(
            s["ports"],
            json!([{"name": "https", "port": 8443, "protocol": "TCP"}])
        );
        let eps = s["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0]["addresses"], json!(["127.1.0.1"]));
        assert_eq!(eps[0]["conditions"]["ready"], false);
        assert_eq!(eps[1]["conditions"]["ready"], true);
        assert_eq!(eps[1]["targetRef"]["name"], "p1");
        assert!(serde_json::from_value::<EndpointSlice>(s).is_ok());
    }

    #[test]
    fn service_without_selector_gets_no_slice() {
        let mut svc = service();
        svc.spec.as_mut().unwrap().selector = None;
        assert!(desired(&svc, &[]).is_none());
    }

    #[test]
    fn comparison_ignores_server_fields() {
        let wanted = desired(&service(), &[pod("p1", "127.1.0.2", true, "web")]).unwrap();
        let mut stored: EndpointSlice = serde_json::from_value(wanted.clone()).unwrap();
        stored.metadata.resource_version = Some("5".into());
        assert!(same(&stored, &wanted));
        let other = desired(&service(), &[pod("p1", "127.1.0.2", false, "web")]).unwrap();
        assert!(!same(&stored, &other));
    }

    #[test]
    fn endpoints_split_ready_and_not_ready_addresses() {
        let svc = service();
        let slice = desired(
            &svc,
            &[
                pod("p1", "127.1.0.2", true, "web"),
                pod("p2", "127.1.0.1", false, "web"),
            ],
        )
        .unwrap();
        let e = desired_endpoints(&svc, &slice);
        assert_eq!(e["metadata"]["name"], "web");
        assert_eq!(e["subsets"][0]["addresses"][0]["ip"], "127.1.0.2");
        assert_eq!(e["subsets"][0]["notReadyAddresses"][0]["ip"], "127.1.0.1");
        assert_eq!(e["subsets"][0]["ports"][0]["port"], 8443);
        let parsed: Endpoints = serde_json::from_value(e.clone()).unwrap();
        assert!(same_endpoints(&parsed, &e));
        let empty = desired_endpoints(&svc, &desired(&svc, &[]).unwrap());
        assert_eq!(empty["subsets"], json!([]));
    }

    #[test]
    fn publish_not_ready_addresses_marks_every_endpoint_ready() {
        let mut svc = service();
        svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let s = desired(&svc, &[pod("p1", "127.1.0.2", false, "web")]).unwrap();
        assert_eq!(s["endpoints"][0]["conditions"]["ready"], true);
    }
}
