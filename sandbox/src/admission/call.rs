//! Calling one webhook over HTTPS: where (`clientConfig.service` through the Service's ready
//! EndpointSlice endpoints, or `clientConfig.url`), TLS verified against `caBundle` and the
//! service's DNS name, bounded by `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::{BodyExt as _, Limited};
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;

use crate::proxy::{ServicePort, Transport, exchange, resolve_endpoint, verified_tls_config};
use crate::view::ClusterView;

/// Responses larger than this are refused.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Why a call failed: the text that follows `failed calling webhook "NAME": ` in the API
/// server's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallFailure(pub String);

/// Formats a timeout as Go's `time.Duration` prints whole seconds.
fn go_duration(timeout: Duration) -> String {
    let secs = timeout.as_secs();
    if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

/// Where and how to reach one webhook, from its `clientConfig`.
struct WebhookEndpoint {
    /// The URL as the API server names it in messages (with `?timeout=`).
    url: String,
    /// Host header value.
    authority: String,
    /// Request path and query.
    path_and_query: String,
    /// TLS server name to verify.
    server_name: String,
    /// Where to connect (`ip:port`), or the resolution error.
    connect: Result<String, String>,
}

fn endpoint(
    view: &dyn ClusterView,
    config: &WebhookClientConfig,
    timeout: Duration,
) -> Result<WebhookEndpoint, CallFailure> {
    let timeout_q = format!("timeout={}", go_duration(timeout));
    if let Some(svc) = &config.service {
        let port = svc.port.unwrap_or(443);
        let path = svc.path.clone().unwrap_or_else(|| "/".into());
        let server_name = format!("{}.{}.svc", svc.name, svc.namespace);
        let authority = format!("{server_name}:{port}");
        let path_and_query = format!("{path}?{timeout_q}");
        let connect = resolve_endpoint(view, &svc.namespace, &svc.name, &ServicePort::Number(port))
            .map(|(ip, p)| format!("{ip}:{p}"))
            .map_err(|e| e.to_string());
        return Ok(WebhookEndpoint {
            url: format!("https://{authority}{path_and_query}"),
            authority,
            path_and_query,
            server_name,
            connect,
        });
    }
    let Some(url) = &config.url else {
        return Err(CallFailure(
            "could not get REST client: webhook clientConfig has neither url nor service".into(),
        ));
    };
    let uri: http::Uri = url.parse().map_err(|e| {
        CallFailure(format!(
            "could not get REST client: invalid url {url:?}: {e}"
        ))
    })?;
    if uri.scheme_str() != Some("https") {
        return Err(CallFailure(format!(
            "could not get REST client: webhook url {url:?} must use https"
        )));
    }
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let authority = uri
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_else(|| host.clone());
    let path = uri.path();
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}&{timeout_q}"),
        None => format!("{path}?{timeout_q}"),
    };
    let connect_host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    Ok(WebhookEndpoint {
        url: format!("https://{authority}{path_and_query}"),
        authority,
        path_and_query,
        server_name: host,
        connect: Ok(format!("{connect_host}:{port}")),
    })
}

/// POSTs `body` (an AdmissionReview) to the webhook and returns the response body.
pub async fn post(
    view: &dyn ClusterView,
    config: &WebhookClientConfig,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<Vec<u8>, CallFailure> {
    let target = endpoint(view, config, timeout)?;
    let fail = |reason: String| {
        CallFailure(format!(
            "failed to call webhook: Post {:?}: {reason}",
            target.url
        ))
    };
    let addr = target.connect.clone().map_err(fail)?;
    let ca = config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let tls = verified_tls_config(&ca).map_err(|e| fail(format!("tls: {e}")))?;
    let request = http::Request::post(target.path_and_query.as_str())
        .header(http::header::HOST, target.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .body(Body::from(body))
        .map_err(|e| fail(e.to_string()))?;
    let transport = Transport::Tls(Arc::new(tls), target.server_name.clone());
    let exchange = async {
        let response = exchange(&addr, &transport, request)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            return Err(CallFailure(if text.is_empty() {
                format!(
                    "failed to call webhook: the server responded with the status code {} but did not return more information",
                    status.as_u16()
                )
            } else {
                format!(
                    "failed to call webhook: an error on the server ({text:?}) has prevented the request from succeeding"
                )
            }));
        }
        Ok(bytes.to_vec())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(fail("context deadline exceeded".into())),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::admissionregistration::v1::ServiceReference;

    use super::*;
    use crate::view::ResourceRef;

    struct Empty;
    impl ClusterView for Empty {
        fn list(&self, _: ResourceRef<'_>, _: Option<&str>) -> Vec<serde_json::Value> {
            Vec::new()
        }
        fn get(&self, _: ResourceRef<'_>, _: Option<&str>, _: &str) -> Option<serde_json::Value> {
            None
        }
    }

    #[test]
    fn service_target_is_named_like_the_real_server_names_it() {
        let config = WebhookClientConfig {
            service: Some(ServiceReference {
                name: "init".into(),
                namespace: "ops".into(),
                path: Some("/initialize".into()),
                port: None,
            }),
            ..Default::default()
        };
        let t = endpoint(&Empty, &config, Duration::from_secs(5)).unwrap();
        assert_eq!(t.url, "https://init.ops.svc:443/initialize?timeout=5s");
        assert_eq!(t.server_name, "init.ops.svc");
        assert_eq!(t.connect, Err("service \"init\" not found".into()));
    }

    #[test]
    fn url_target_keeps_its_query_and_host() {
        let config = WebhookClientConfig {
            url: Some("https://127.0.0.1:9443/m?x=1".into()),
            ..Default::default()
        };
        let t = endpoint(&Empty, &config, Duration::from_secs(10)).unwrap();
        assert_eq!(t.url, "https://127.0.0.1:9443/m?x=1&timeout=10s");
        assert_eq!(t.connect, Ok("127.0.0.1:9443".into()));
        assert_eq!(t.server_name, "127.0.0.1");
        let plain = WebhookClientConfig {
            url: Some("http://127.0.0.1:9443/m".into()),
            ..Default::default()
        };
        assert!(endpoint(&Empty, &plain, Duration::from_secs(10)).is_err());
    }

    #[tokio::test]
    async fn unreachable_service_fails_with_the_post_url_in_the_message() {
        let config = WebhookClientConfig {
            service: Some(ServiceReference {
                name: "init".into(),
                namespace: "ops".into(),
                path: Some("/initialize".into()),
                port: Some(443),
            }),
            ..Default::default()
        };
        let err = post(&Empty, &config, Duration::from_secs(5), b"{}".to_vec())
            .await
            .unwrap_err();
        assert_eq!(
            err.0,
            "failed to call webhook: Post \"https://init.ops.svc:443/initialize?timeout=5s\": service \"init\" not found"
        );
    }
}
