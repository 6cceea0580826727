//! The operator's client of the API server: kube's own stack (TLS from the kubeconfig or the
//! pod's service account, the token refreshed by its auth layer, connect, read and write
//! timeouts), with the requests counted by verb ([`CountRequests`]) and fewer idle connections
//! kept.
//!
//! kube's builder keeps every idle connection a burst opened, for 90 s. The client speaks
//! HTTP/1.1, one request per connection at a time, so applying 100 Initializers at once left the
//! leader holding hundreds of idle TLS connections to the API server, with their buffers, beside
//! the watches' own (`make bench-scale` counts them). client-go keeps at most 25 idle per host;
//! so does this client.
//!
//! Two of kube's defaults are not the operator's. kube sets no read timeout (its watcher has its
//! own idle timeout); the operator's calls include the one that removes a webhook configuration
//! when an initializer stops answering, which must fail and be tried again, never hang, so a
//! response that does not come within [`READ_TIMEOUT`] fails. kube retries 429, 503 and 504 with
//! a backoff of up to minutes; the operator's reconcilers already retry with their own backoff,
//! and a retry inside a call would hold the removal back, so the client does not.

use std::time::Duration;

use hyper_util::client::legacy::Builder;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use crate::api_requests::CountRequests;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Idle connections to the API server kept for reuse (client-go's `MaxIdleConnsPerHost`).
pub const IDLE_CONNECTIONS: usize = 25;

/// How long a request waits for its response: longer than the API server's longest watch
/// (kube's watcher asks for 290 s), the timeout kube itself used before it left watches to the
/// watcher.
pub const READ_TIMEOUT: Duration = Duration::from_secs(295);

/// A client of the API server `config` names, counting its requests in `metrics`.
pub fn build(mut config: Config, metrics: &Metrics) -> Result<Client> {
    config.read_timeout.get_or_insert(READ_TIMEOUT);
    // The timeout counts from the request, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config.default_retry = false;
    let failed = |e: kube::Error| Error::Client(Box::new(e));
    let counted = CountRequests::new(metrics.api_requests.clone());
    if config.proxy_url.is_some() {
        // A proxy takes kube's connectors for it: keep kube's whole stack.
        return Ok(kube::client::ClientBuilder::try_from(config)
            .map_err(failed)?
            .with_layer(&counted)
            .build());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(failed)?;
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    timed.set_reset_reader_on_write(config.reset_reader_on_write);
    let connections = Builder::new(TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .build(timed);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(failed)?)
        .layer(config.extra_headers_layer().map_err(failed)?)
        .layer(counted)
        .map_err(BoxError::from)
        .service(connections);
    Ok(Client::new(service, config.default_namespace))
}
