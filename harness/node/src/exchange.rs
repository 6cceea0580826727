//! One HTTP/1.1 exchange over a fresh connection, plain or TLS, and a TLS client configuration
//! that does not verify the server's certificate: what the kubelet's HTTP(S) probes send.
//!
//! Errors are worded as Go's net/http and crypto/tls word them, so probe messages read like a
//! kubelet's. The sandbox's API server uses the same exchange for its service proxy and its
//! admission webhook calls.

use std::sync::Arc;

use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any server certificate: what `InsecureSkipVerify` does in the API server's service
/// proxy and the kubelet's HTTPS probes. Signatures are still checked so the handshake is sound.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client configuration that does not verify the server's certificate.
pub fn insecure_tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = provider();
    Ok(
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth(),
    )
}

/// Why an HTTP exchange failed, worded as Go's net/http and crypto/tls word it (the API server's
/// messages embed these).
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// TCP connect failed.
    #[error("dial tcp {addr}: {reason}")]
    Dial { addr: String, reason: String },
    /// The TLS handshake failed.
    #[error("{0}")]
    Tls(String),
    /// Sending the request or reading the response failed.
    #[error("{0}")]
    Http(String),
}

fn dial_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::TimedOut => "i/o timeout".into(),
        _ => format!("connect: {e}"),
    }
}

fn tls_reason(e: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    let Some(err) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "EOF".into(),
            _ => format!("tls: {e}"),
        };
    };
    match err {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority".into()
        }
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "tls: failed to verify certificate: x509: certificate is not valid for the requested name".into()
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. }) => {
            "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".into()
        }
        other => format!("tls: {other}"),
    }
}

/// Whether a request goes over plain TCP or TLS.
#[derive(Clone)]
pub enum Transport {
    /// Plain HTTP.
    Plain,
    /// HTTPS with this configuration and server name.
    Tls(Arc<rustls::ClientConfig>, String),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain => f.write_str("Plain"),
            Self::Tls(_, name) => write!(f, "Tls({name})"),
        }
    }
}

/// Sends one request over a fresh HTTP/1.1 connection to `addr` and returns the response with its
/// body still streaming. The caller bounds the time it takes.
pub async fn exchange<B>(
    addr: &str,
    transport: &Transport,
    request: http::Request<B>,
) -> Result<http::Response<ExchangeBody>, ExchangeError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ExchangeError::Dial {
            addr: addr.to_owned(),
            reason: dial_reason(&e),
        })?;
    let _ = tcp.set_nodelay(true);
    match transport {
        Transport::Plain => send(TokioIo::new(tcp), request).await,
        Transport::Tls(config, server_name) => {
            let name = ServerName::try_from(server_name.clone()).map_err(|e| {
                ExchangeError::Tls(format!("tls: invalid server name {server_name:?}: {e}"))
            })?;
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| ExchangeError::Tls(tls_reason(&e)))?;
            send(TokioIo::new(tls), request).await
        }
    }
}

/// Aborts the connection task when dropped: with the exchange future (a caller's timeout) or
/// with the response body, so a backend that never answers (a frozen pod) holds no task and no
/// socket after its caller gave up.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A response body that keeps its connection alive for as long as it exists.
pub type ExchangeBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, hyper::Error>;

async fn send<T, B>(
    io: TokioIo<T>,
    request: http::Request<B>,
) -> Result<http::Response<ExchangeBody>, ExchangeError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| ExchangeError::Http(e.to_string()))?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let guard = AbortOnDrop(task.abort_handle());
    let response = sender.send_request(request).await.map_err(|e| {
        if e.is_incomplete_message() || e.is_canceled() {
            ExchangeError::Http("EOF".into())
        } else {
            ExchangeError::Http(e.to_string())
        }
    })?;
    Ok(response.map(move |body| {
        body.map_frame(move |frame| {
            let _keep = &guard;
            frame
        })
        .boxed_unsync()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_caller_giving_up_closes_the_connection_to_a_silent_backend() {
        use tokio::io::AsyncReadExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let request = http::Request::get("/")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let call = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            exchange(&addr, &Transport::Plain, request),
        );
        let (accepted, timed_out) = tokio::join!(listener.accept(), call);
        assert!(timed_out.is_err(), "the backend never answers");
        let (mut socket, _) = accepted.unwrap();
        // Drain the request, then expect EOF: the client side was closed.
        let mut buf = vec![0u8; 4096];
        let closed = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the connection stayed open after the caller gave up"
        );
    }
}
