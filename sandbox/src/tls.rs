//! The sandbox's certificate authority, its serving certificate, and the kubeconfig that trusts
//! it.
//!
//! The CA is kept in the state directory (`ca.crt`, `ca.key`) and reused on the next start, so a
//! client trusting it keeps trusting the sandbox; the serving certificate and the bearer token
//! are made anew each start, so a kubeconfig from an earlier start no longer authenticates.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::Error;

/// The CA and a serving certificate signed by it, PEM-encoded.
#[derive(Clone, Debug)]
pub struct Certificates {
    /// CA certificate (what clients trust).
    pub ca_pem: String,
    pub ca_key_pem: String,
    /// Serving certificate, for the names in the README.
    pub cert_pem: String,
    /// Serving private key.
    pub key_pem: String,
}

fn gen_err(e: impl std::fmt::Display) -> Error {
    Error::GenerateCertificates(e.to_string())
}

fn state_err(path: &Path, source: std::io::Error) -> Error {
    Error::StateFile {
        path: path.display().to_string(),
        source,
    }
}

/// Loads the CA from `dir` or makes a new one, and signs a fresh serving certificate for
/// 127.0.0.1, localhost and the in-cluster names of the `kubernetes` service.
pub fn load_or_create(dir: &Path) -> Result<Certificates, Error> {
    let ca_crt_path = dir.join("ca.crt");
    let ca_key_path = dir.join("ca.key");
    let (ca_pem, ca_key_pem) = if ca_crt_path.exists() && ca_key_path.exists() {
        let crt = std::fs::read_to_string(&ca_crt_path).map_err(|e| state_err(&ca_crt_path, e))?;
        let key = std::fs::read_to_string(&ca_key_path).map_err(|e| state_err(&ca_key_path, e))?;
        (crt, key)
    } else {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "initializer-sandbox-ca");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.self_signed(&key).map_err(gen_err)?;
        let (crt, key) = (cert.pem(), key.serialize_pem());
        write_private(&ca_crt_path, &crt)?;
        write_private(&ca_key_path, &key)?;
        (crt, key)
    };
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(gen_err)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(gen_err)?;
    let names: Vec<String> = [
        "127.0.0.1",
        "::1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut params = CertificateParams::new(names).map_err(gen_err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(gen_err)?;
    let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
    Ok(Certificates {
        ca_pem,
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| state_err(path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| state_err(path, e))?;
    }
    Ok(())
}

/// A rustls server configuration serving `certs`, offering HTTP/2 and HTTP/1.1.
pub fn server_config(certs: &Certificates) -> Result<Arc<rustls::ServerConfig>, Error> {
    let tls_err = |e: &dyn std::fmt::Display| Error::ConfigureTls(e.to_string());
    let chain = CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(&e))?;
    let key = PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes()).map_err(|e| match e {
        pem::Error::NoItemsFound => Error::ConfigureTls("no private key in pem".into()),
        e => tls_err(&e),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| tls_err(&e))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The kubeconfig text for a server at `url` trusted through `ca_pem`, with namespace `default`.
///
/// The user carries `token`, the bearer token the sandbox requires of every request (it
/// authenticates, but does not authorize: whoever holds the token is cluster admin).
pub fn kubeconfig(url: &str, ca_pem: &str, user: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: sandbox
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: sandbox
  context:
    cluster: sandbox
    user: {user}
    namespace: default
current-context: sandbox
preferences: {{}}
"
    )
}

/// Writes `text` to `path` readable only by the owner.
pub fn write_kubeconfig(path: &Path, text: &str) -> Result<(), Error> {
    write_private(path, text)
}
