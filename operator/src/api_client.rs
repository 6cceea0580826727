//! The operator's client of the API server: kube's own stack (TLS from the kubeconfig or the
//! pod's service account, the token refreshed by its auth layer, connect, read and write
//! timeouts), with the requests counted by verb ([`CountRequests`]) and fewer idle connections
//! kept.
//!
//! kube's builder keeps every idle connection a burst opened, for 90 s. The client speaks
//! HTTP/1.1, one request per connection at a time, so applying 100 Initializers at once left the
//! leader holding about 400 idle TLS connections to the API server, with their buffers, beside
//! the watches' own: `make bench-scale` measured 508 connections for 100 Initializers on the
//! sandbox. client-go keeps at most 25 idle per host; so does this client.

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

/// A client of the API server `config` names, counting its requests in `metrics`.
pub fn build(config: Config, metrics: &Metrics) -> Result<Client> {
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
