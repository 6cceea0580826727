//! The API server's service proxy: `/api/v1/namespaces/NS/services/[https:]NAME[:PORT]/proxy/...`
//! forwarded to a ready endpoint of the Service.
//!
//! Also the pieces admission shares with it: resolving a Service port to a ready endpoint through
//! its EndpointSlices, and a TLS client configuration verified against a CA bundle. The HTTP/1.1
//! exchange itself and the unverified TLS configuration (as the API server's proxy and the
//! kubelet's probes use it) come from [`initializer_node::exchange`] and are re-exported here.

use std::sync::Arc;

use axum::body::Body;
use http_body_util::BodyExt as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::Value;

pub use initializer_node::exchange::{
    ExchangeBody, ExchangeError, Transport, exchange, insecure_tls_config,
};

use crate::json::elements;
use crate::view::{ClusterView, ResourceRef};

const SERVICES: ResourceRef<'static> = ResourceRef::new("", "v1", "services");
const ENDPOINT_SLICES: ResourceRef<'static> =
    ResourceRef::new("discovery.k8s.io", "v1", "endpointslices");

/// The label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Which port of a Service a caller means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServicePort {
    /// By `port` number (webhooks: `clientConfig.service.port`, default 443).
    Number(i32),
    Name(String),
    /// Not given: the Service's only (or unnamed) port.
    Unspecified,
}

/// Why a Service has no usable endpoint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The Service does not exist.
    #[error("service \"{0}\" not found")]
    ServiceNotFound(String),
    /// The Service has no such port.
    #[error("failed to find port {port} on service \"{service}\"")]
    NoSuchPort { service: String, port: String },
    /// No endpoint is ready.
    #[error("no endpoints available for service \"{0}\"")]
    NoEndpoints(String),
}

/// Resolves a Service port to a ready endpoint `(ip, port)`, picking one at random when several
/// are ready.
pub fn resolve_endpoint(
    view: &dyn ClusterView,
    namespace: &str,
    service: &str,
    port: &ServicePort,
) -> Result<(String, u16), ResolveError> {
    let svc = view
        .get(SERVICES, Some(namespace), service)
        .ok_or_else(|| ResolveError::ServiceNotFound(service.to_owned()))?;
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let port_name = |p: &Value| {
        p.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let found = match port {
        ServicePort::Number(n) => ports
            .iter()
            .find(|p| p.get("port").and_then(Value::as_i64) == Some(i64::from(*n))),
        ServicePort::Name(name) => ports.iter().find(|p| port_name(p) == *name),
        ServicePort::Unspecified => {
            ports
                .iter()
                .find(|p| port_name(p).is_empty())
                .or(if ports.len() == 1 {
                    ports.first()
                } else {
                    None
                })
        }
    };
    let Some(svc_port) = found else {
        let asked = match port {
            ServicePort::Number(n) => n.to_string(),
            ServicePort::Name(n) => n.clone(),
            ServicePort::Unspecified => "\"\"".into(),
        };
        return Err(ResolveError::NoSuchPort {
            service: service.to_owned(),
            port: asked,
        });
    };
    let svc_port_name = port_name(svc_port);
    let numeric_target = match svc_port.get("targetPort") {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Some(Value::String(s)) => s.parse::<u16>().ok(),
        None => svc_port
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok()),
        _ => None,
    };
    let mut candidates = Vec::new();
    for slice in view.list(ENDPOINT_SLICES, Some(namespace)) {
        if slice
            .pointer(&format!(
                "/metadata/labels/{}",
                SERVICE_NAME_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            != Some(service)
        {
            continue;
        }
        let slice_port = slice
            .get("ports")
            .and_then(Value::as_array)
            .and_then(|ps| ps.iter().find(|p| port_name(p) == svc_port_name))
            .and_then(|p| p.get("port"))
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .or(numeric_target);
        let Some(target) = slice_port else { continue };
        for endpoint in elements(slice.get("endpoints")) {
            // An absent `ready` means ready, as consumers of EndpointSlices treat it.
            if endpoint
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                == Some(false)
            {
                continue;
            }
            if let Some(addr) = endpoint.pointer("/addresses/0").and_then(Value::as_str) {
                candidates.push((addr.to_owned(), target));
            }
        }
    }
    if candidates.is_empty() {
        return Err(ResolveError::NoEndpoints(service.to_owned()));
    }
    let pick = rand::random_range(0..candidates.len());
    Ok(candidates.swap_remove(pick))
}

/// A TLS client configuration trusting exactly the PEM certificates in `ca_pem` (none when it
/// holds none: every server is then refused).
pub fn verified_tls_config(ca_pem: &[u8]) -> Result<rustls::ClientConfig, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem).flatten() {
        // A malformed certificate in the bundle is skipped, like Go's AppendCertsFromPEM does.
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A `metav1.Status` failure response.
pub fn status_response(
    code: http::StatusCode,
    reason: &str,
    message: String,
) -> http::Response<Body> {
    let status = crate::error::ApiError::new(code.as_u16(), reason, message).to_status();
    let mut response = http::Response::new(Body::from(status.to_string()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Parses the URL's service reference: `[scheme:]NAME[:PORT]`.
fn parse_service_ref(service_ref: &str) -> (bool, String, ServicePort) {
    let parts: Vec<&str> = service_ref.split(':').collect();
    let (https, name, port) = match parts.as_slice() {
        [name] => (false, *name, ""),
        [scheme @ ("http" | "https"), name] if !name.is_empty() => (*scheme == "https", *name, ""),
        [name, port] => (false, *name, *port),
        [scheme, name, port] => (*scheme == "https", *name, *port),
        _ => (false, service_ref, ""),
    };
    let port = if port.is_empty() {
        ServicePort::Unspecified
    } else if let Ok(n) = port.parse::<i32>() {
        ServicePort::Number(n)
    } else {
        ServicePort::Name(port.to_owned())
    };
    (https, name.to_owned(), port)
}

/// Headers that describe one hop and are not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "authorization",
];

/// Forwards `request` to a ready endpoint of the Service named by `service_ref`
/// (`https:NAME:PORT`, `NAME:PORT`, `NAME:https`, `NAME`) in `namespace`, at `path_and_query`.
///
/// Method, headers (less hop-by-hop ones and `Authorization`) and body are forwarded; for `https:`
/// the backend's certificate is not verified. 503 when no endpoint is ready, 502 when the
/// backend cannot be reached.
pub async fn forward(
    view: &dyn ClusterView,
    namespace: &str,
    service_ref: &str,
    path_and_query: &str,
    request: http::Request<Body>,
) -> http::Response<Body> {
    let (https, name, port) = parse_service_ref(service_ref);
    let (ip, target_port) = match resolve_endpoint(view, namespace, &name, &port) {
        Ok(e) => e,
        Err(ResolveError::ServiceNotFound(_)) => {
            return status_response(
                http::StatusCode::NOT_FOUND,
                "NotFound",
                format!("services \"{name}\" not found"),
            );
        }
        Err(e) => {
            return status_response(
                http::StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                e.to_string(),
            );
        }
    };
    let addr = format!("{ip}:{target_port}");
    let transport = if https {
        match insecure_tls_config() {
            Ok(c) => Transport::Tls(Arc::new(c), ip.clone()),
            Err(e) => {
                return status_response(
                    http::StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    format!("failed to build tls configuration: {e}"),
                );
            }
        }
    } else {
        Transport::Plain
    };
    let path_and_query = if path_and_query.starts_with('/') {
        path_and_query.to_owned()
    } else {
        format!("/{path_and_query}")
    };
    let (parts, body) = request.into_parts();
    let mut builder = http::Request::builder()
        .method(parts.method)
        .uri(path_and_query.as_str());
    for (key, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&key.as_str()) && key != http::header::HOST {
            builder = builder.header(key, value);
        }
    }
    builder = builder.header(http::header::HOST, addr.as_str());
    let outgoing = match builder.body(body) {
        Ok(r) => r,
        Err(e) => {
            return status_response(
                http::StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("failed to build proxied request: {e}"),
            );
        }
    };
    match exchange(&addr, &transport, outgoing).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(*h);
            }
            http::Response::from_parts(parts, Body::new(body.map_err(axum::Error::new)))
        }
        Err(e) => status_response(
            http::StatusCode::BAD_GATEWAY,
            "ServiceUnavailable",
            format!("error trying to reach service: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::view::MemoryView;

    #[test]
    fn service_refs_parse_like_the_api_server_does() {
        assert_eq!(
            parse_service_ref("https:web:443"),
            (true, "web".into(), ServicePort::Number(443))
        );
        assert_eq!(
            parse_service_ref("web:8080"),
            (false, "web".into(), ServicePort::Number(8080))
        );
        assert_eq!(
            parse_service_ref("web:https"),
            (false, "web".into(), ServicePort::Name("https".into()))
        );
        assert_eq!(
            parse_service_ref("web"),
            (false, "web".into(), ServicePort::Unspecified)
        );
        assert_eq!(
            parse_service_ref("https:web:"),
            (true, "web".into(), ServicePort::Unspecified)
        );
    }

    fn view(ready: &[(&str, bool)]) -> MemoryView {
        let v = MemoryView::default();
        v.add(
            "services",
            json!({"metadata": {"name": "web", "namespace": "a"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}, {"name": "metrics", "port": 9090, "targetPort": 9090}]}}),
        );
        let endpoints: Vec<Value> = ready
            .iter()
            .map(|(ip, r)| json!({"addresses": [ip], "conditions": {"ready": r}}))
            .collect();
        v.add(
            "endpointslices",
            json!({"metadata": {"name": "web-x", "namespace": "a", "labels": {SERVICE_NAME_LABEL: "web"}},
                "ports": [{"name": "https", "port": 8443}, {"name": "metrics", "port": 9090}], "endpoints": endpoints}),
        );
        v
    }

    #[test]
    fn resolution_picks_a_ready_endpoint_and_the_slice_port() {
        let v = view(&[("127.1.0.1", false), ("127.1.0.2", true)]);
        assert_eq!(
            resolve_endpoint(&v, "a", "web", &ServicePort::Number(443)).unwrap(),
            ("127.1.0.2".into(), 8443)
        );
        assert_eq!(
            resolve_endpoint(&v, "a", "web", &ServicePort::Name("metrics".into())).unwrap(),
            ("127.1.0.2".into(), 9090)
        );
    }

    #[test]
    fn resolution_reports_missing_service_port_and_endpoints() {
        let v = view(&[("127.1.0.1", false)]);
        assert_eq!(
            resolve_endpoint(&v, "a", "web", &ServicePort::Number(443)),
            Err(ResolveError::NoEndpoints("web".into()))
        );
        assert_eq!(
            resolve_endpoint(&v, "a", "nope", &ServicePort::Number(443)),
            Err(ResolveError::ServiceNotFound("nope".into()))
        );
        assert!(matches!(
            resolve_endpoint(&v, "a", "web", &ServicePort::Number(1)),
            Err(ResolveError::NoSuchPort { .. })
        ));
        assert!(matches!(
            resolve_endpoint(&v, "b", "web", &ServicePort::Number(443)),
            Err(ResolveError::ServiceNotFound(_))
        ));
    }
}
