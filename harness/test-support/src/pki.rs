//! Test certificates: a CA that issues serving certificates for given names, and the
//! CA-plus-serving-certificate pair a TLS server test needs.
//!
//! Failures panic: a test without its certificates cannot go on, and the message says which
//! step failed.
#![allow(clippy::expect_used)]

use std::path::Path;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A certificate authority for tests.
pub struct TestCa {
    /// The CA certificate (PEM), what clients trust.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA whose common name is `name`.
    pub fn new(name: &str) -> Self {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).expect("failed to prepare the test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("failed to generate the test CA's key");
        let cert = params
            .self_signed(&key)
            .expect("failed to self-sign the test CA");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate and its key (both PEM) for `names`, signed by this CA.
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        self.issue_named(names, None)
    }

    /// [`TestCa::issue`] with a subject common name.
    pub fn issue_named(&self, names: &[&str], common_name: Option<&str>) -> (String, String) {
        let mut params = CertificateParams::new(owned(names))
            .expect("failed to prepare a test serving certificate");
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let key = KeyPair::generate().expect("failed to generate a test serving key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("failed to sign a test serving certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// The CA certificate base64-encoded, as a webhook configuration's `caBundle`.
    pub fn bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.pem)
    }
}

/// A CA and a serving certificate for `127.0.0.1` and `localhost` signed by it.
pub struct TestPki {
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// The serving certificate (PEM).
    pub cert_pem: String,
    /// The serving key (PEM).
    pub key_pem: String,
}

impl TestPki {
    /// A CA named "`common_name` CA" and a certificate named `common_name` for the loopback.
    pub fn new(common_name: &str) -> Self {
        let ca = TestCa::new(&format!("{common_name} CA"));
        let (cert_pem, key_pem) = ca.issue_named(&["127.0.0.1", "localhost"], Some(common_name));
        Self {
            ca_pem: ca.pem,
            cert_pem,
            key_pem,
        }
    }

    /// Writes `tls.crt` and `tls.key` into `dir`, key first (as a rotation might).
    pub fn write(&self, dir: &Path) {
        std::fs::write(dir.join("tls.key"), &self.key_pem).expect("failed to write tls.key");
        std::fs::write(dir.join("tls.crt"), &self.cert_pem).expect("failed to write tls.crt");
    }
}

/// A TLS acceptor serving `cert_pem` with `key_pem` (ring provider, safe default protocol
/// versions, no client authentication): the server side of a test webhook or probe target.
pub fn tls_acceptor(cert_pem: &str, key_pem: &str) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("failed to read the test certificate PEM");
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("failed to read the test key PEM");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("failed to build the test TLS server configuration");
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// A TLS connector trusting the CA `ca_pem` alone (ring provider, safe default protocol
/// versions, no client certificate): the client side of a test's call to a server it started.
pub fn tls_connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.expect("failed to read the test CA PEM"))
            .expect("failed to trust the test CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

/// A self-signed certificate and its key (both PEM) for `names`, with no CA behind it.
pub fn self_signed(names: &[&str]) -> (String, String) {
    let key = KeyPair::generate().expect("failed to generate a self-signed test key");
    let cert = CertificateParams::new(owned(names))
        .expect("failed to prepare a self-signed test certificate")
        .self_signed(&key)
        .expect("failed to self-sign a test certificate");
    (cert.pem(), key.serialize_pem())
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject_alt_names(pem: &str) -> String {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("parse PEM");
        let cert = pem.parse_x509().expect("parse certificate");
        let names = cert
            .subject_alternative_name()
            .expect("valid extensions")
            .expect("a subjectAltName");
        format!("{:?}", names.value.general_names)
    }

    #[test]
    fn issued_certificates_name_the_requested_hosts() {
        let ca = TestCa::new("test");
        let (cert, key) = ca.issue(&["svc.ns.svc", "127.0.0.1"]);
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY"));
        let names = subject_alt_names(&cert);
        assert!(
            names.contains("svc.ns.svc") && names.contains("[127, 0, 0, 1]"),
            "{names}"
        );
    }

    #[test]
    fn the_bundle_is_the_ca_certificate_in_base64() {
        let ca = TestCa::new("test");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(ca.bundle())
            .expect("base64");
        assert_eq!(decoded, ca.pem.as_bytes());
    }

    #[test]
    fn the_pki_serves_the_loopback_and_writes_key_and_certificate() {
        let pki = TestPki::new("server");
        assert_ne!(pki.ca_pem, pki.cert_pem);
        let names = subject_alt_names(&pki.cert_pem);
        assert!(names.contains("localhost"), "{names}");
        let dir = tempfile::tempdir().expect("tempdir");
        pki.write(dir.path());
        let written = std::fs::read_to_string(dir.path().join("tls.crt")).expect("read tls.crt");
        assert_eq!(written, pki.cert_pem);
    }

    #[tokio::test]
    async fn the_acceptor_completes_a_handshake_with_a_client_trusting_the_ca() {
        let ca = TestCa::new("test");
        let (cert, key) = ca.issue(&["localhost"]);
        let acceptor = tls_acceptor(&cert, &key);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            acceptor.accept(tcp).await.map(|_| ())
        });
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject as _;
        for der in rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
            roots.add(der.expect("CA PEM")).expect("add CA");
        }
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        connector
            .connect(name, tcp)
            .await
            .expect("client handshake");
        server.await.expect("join").expect("server handshake");
    }

    #[test]
    fn self_signed_certificates_carry_their_names() {
        let (cert, _) = self_signed(&["secure.apps.svc"]);
        assert!(subject_alt_names(&cert).contains("secure.apps.svc"));
    }
}
