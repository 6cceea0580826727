//! A small HTTPS client for admission endpoints: one keep-alive HTTP/1.1 connection, trusting a
//! given CA (there is no way to skip verification). Used by the load generator, the benchmarks
//! and the SDK's socket-level tests.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What failed while connecting to or requesting from an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS client configuration could not be built.
    #[error("failed to build the TLS client configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The CA PEM could not be parsed.
    #[error("failed to parse the CA certificates: {0}")]
    Ca(String),
    /// The URL, connection, handshake or request failed.
    #[error("failed to send the request to {url}: {message}")]
    Request {
        /// Where the request went.
        url: String,
        /// What failed.
        message: String,
    },
}

/// Whom the client trusts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Certificates signed by these PEM-encoded CAs.
    CaPem(Vec<u8>),
}

/// A parsed `https://host:port/path` URL.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Host name or IP, used for SNI and verification.
    pub host: String,
    /// Port (443 by default).
    pub port: u16,
    /// Path and query.
    pub path: String,
}

impl Endpoint {
    /// Parse an `https://` URL.
    pub fn parse(url: &str) -> Result<Self, ClientError> {
        let fail = |m: &str| ClientError::Request {
            url: url.to_owned(),
            message: m.to_owned(),
        };
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| fail("failed to parse the URL: it must start with https://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(stripped) = authority.strip_prefix('[') {
            let (h, p) = stripped
                .split_once(']')
                .ok_or_else(|| fail("failed to parse the IPv6 host"))?;
            (h, p.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| fail("failed to parse the port"))?,
            None => 443,
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

/// Build a TLS connector for `trust`.
pub fn connector(trust: &Trust) -> Result<TlsConnector, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let Trust::CaPem(pem) = trust;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| ClientError::Ca(e.to_string()))?;
        roots.add(cert)?;
    }
    let config = builder.with_root_certificates(roots).with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// One keep-alive connection to an endpoint.
pub struct Connection {
    url: String,
    endpoint: Endpoint,
    sender: http1::SendRequest<Full<Bytes>>,
    peer_certificate: Option<CertificateDer<'static>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .finish()
    }
}

/// A response: status and body.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// The whole response body.
    pub body: Bytes,
}

impl Connection {
    /// Connect (TCP, TLS, HTTP/1.1 handshake) to `url`.
    pub async fn open(url: &str, connector: &TlsConnector) -> Result<Self, ClientError> {
        let fail = |m: String| ClientError::Request {
            url: url.to_owned(),
            message: m,
        };
        let endpoint = Endpoint::parse(url)?;
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| fail(format!("failed to connect: {e}")))?;
        tcp.set_nodelay(true)
            .map_err(|e| fail(format!("failed to set TCP_NODELAY: {e}")))?;
        let name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| fail(format!("failed to use the host as a server name: {e}")))?;
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| fail(format!("failed the TLS handshake: {e}")))?;
        let peer_certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.clone().into_owned());
        let (sender, connection) = http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(format!("failed the HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "client connection ended");
            }
        });
        Ok(Self {
            url: url.to_owned(),
            endpoint,
            sender,
            peer_certificate,
        })
    }

    /// The server's end-entity certificate as presented at the handshake.
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.peer_certificate.as_ref()
    }

    /// Send a request with `method` and `body` to `path` (the URL's path when `None`).
    pub async fn request(
        &mut self,
        method: &str,
        path: Option<&str>,
        body: Bytes,
    ) -> Result<Reply, ClientError> {
        let fail = |m: String| ClientError::Request {
            url: self.url.clone(),
            message: m,
        };
        let path = path.unwrap_or(&self.endpoint.path);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(
                http::header::HOST,
                format!("{}:{}", self.endpoint.host, self.endpoint.port),
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| fail(format!("failed to build the request: {e}")))?;
        self.sender
            .ready()
            .await
            .map_err(|e| fail(format!("failed to reuse the connection: {e}")))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| fail(format!("failed to send: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(format!("failed to read the response: {e}")))?
            .to_bytes();
        Ok(Reply { status, body })
    }

    /// POST `body` to the URL's path.
    pub async fn post(&mut self, body: Bytes) -> Result<Reply, ClientError> {
        self.request("POST", None, body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_host_port_and_path() {
        let t = Endpoint::parse("https://127.0.0.1:8443/initialize").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8443, "/initialize")
        );
        let t = Endpoint::parse("https://example.com").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("example.com", 443, "/")
        );
        let t = Endpoint::parse("https://[::1]:9443/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9443));
        assert!(Endpoint::parse("http://x").is_err());
        assert!(Endpoint::parse("https://x:notaport/").is_err());
    }
}
