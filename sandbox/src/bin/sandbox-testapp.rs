//! A small HTTP(S) server the sandbox's workload tests run as a pod.
//!
//! Listens on `$POD_IP:$PORT` (defaults `127.0.0.1:8080`), over HTTPS when `--tls-dir DIR` names a
//! directory with `tls.crt` and `tls.key` (read again for every connection, so a renewed
//! certificate is served at once). Answers:
//! - `GET /healthz` → 200; `GET /readyz` → 200, or 503 while `--not-ready-file FILE` exists;
//! - `GET /info` → JSON with the args, the environment and the working directory;
//! - `GET /read?PATH` → the file's content;
//! - anything else → JSON echo of method, path, content type and body.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

#[derive(Clone, Debug, Default)]
struct Options {
    tls_dir: Option<PathBuf>,
    not_ready_file: Option<PathBuf>,
}

fn options() -> Options {
    let mut o = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tls-dir" => o.tls_dir = args.next().map(PathBuf::from),
            "--not-ready-file" => o.not_ready_file = args.next().map(PathBuf::from),
            _ => {}
        }
    }
    o
}

fn tls_config(dir: &std::path::Path) -> anyhow::Result<rustls::ServerConfig> {
    let cert = std::fs::read(dir.join("tls.crt"))?;
    let key = std::fs::read(dir.join("tls.key"))?;
    let certs = CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(&key)
        .with_context(|| format!("failed to read the private key in {}", dir.display()))?;
    Ok(rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?)
}

async fn answer(
    options: Arc<Options>,
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let (status, content_type, body) = match (method.as_str(), path.as_str()) {
        ("GET", "/healthz") => (200, "text/plain".to_owned(), Bytes::from_static(b"ok")),
        ("GET", "/readyz") => {
            if options.not_ready_file.as_ref().is_some_and(|f| f.exists()) {
                (
                    503,
                    "text/plain".to_owned(),
                    Bytes::from_static(b"not ready"),
                )
            } else {
                (200, "text/plain".to_owned(), Bytes::from_static(b"ok"))
            }
        }
        ("GET", "/info") => {
            let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
            let info = json!({
                "args": std::env::args().skip(1).collect::<Vec<_>>(),
                "env": env,
                "cwd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
            });
            (
                200,
                "application/json".to_owned(),
                Bytes::from(info.to_string()),
            )
        }
        ("GET", "/read") => match std::fs::read(&query) {
            Ok(content) => (
                200,
                "application/octet-stream".to_owned(),
                Bytes::from(content),
            ),
            Err(e) => (404, "text/plain".to_owned(), Bytes::from(e.to_string())),
        },
        _ => {
            let echo = json!({
                "method": method.as_str(),
                "path": path,
                "query": query,
                "contentType": content_type,
                "body": String::from_utf8_lossy(&body),
            });
            (
                200,
                "application/json".to_owned(),
                Bytes::from(echo.to_string()),
            )
        }
    };
    let mut response = http::Response::new(Full::new(body));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    if let Ok(v) = http::HeaderValue::from_str(&content_type) {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    Ok(response)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let options = Arc::new(options());
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let listener = tokio::net::TcpListener::bind(format!("{ip}:{port}")).await?;
    println!("listening on {ip}:{port} tls={}", options.tls_dir.is_some());
    loop {
        let (tcp, _) = listener.accept().await?;
        let options = options.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn({
                let options = options.clone();
                move |req| answer(options.clone(), req)
            });
            let http = hyper::server::conn::http1::Builder::new();
            match &options.tls_dir {
                Some(dir) => {
                    let Ok(config) = tls_config(dir) else { return };
                    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = http.serve_connection(TokioIo::new(tls), service).await;
                    }
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                }
            }
        });
    }
}
