//! The serving certificate, reloaded when `tls.crt` or `tls.key` change.
//!
//! [`CertStore`] is a rustls certificate resolver: every handshake reads the pair in force, a
//! poll swaps in a new pair atomically once both files parse and belong together. Established
//! connections keep the certificate they were opened with; nothing restarts. The key that signs
//! the initialized-by mark is derived from the serving key in force, so it follows it
//! (see `mark`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::Error;
use crate::mark::KeyCell;
use crate::reload::{Offered, Reloadable};

/// File name of the certificate chain in the TLS directory (a `kubernetes.io/tls` Secret).
pub(crate) const CERT_FILE: &str = "tls.crt";
/// File name of the private key in the TLS directory.
pub(crate) const KEY_FILE: &str = "tls.key";

/// The certificate in force and where it comes from.
pub(crate) struct CertStore {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    /// The pair in force, from the (certificate, key) bytes seen last.
    value: Reloadable<CertifiedKey, (Vec<u8>, Vec<u8>)>,
    /// Where the mark key derived from the serving key in force goes.
    mark_key: Arc<KeyCell>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("dir", &self.dir)
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

/// What a poll of the TLS directory did.
#[derive(Debug)]
pub(crate) enum CertReload {
    /// The files did not change.
    Unchanged,
    /// A new certificate is in force.
    Applied,
    /// The new files were refused; the previous certificate stays.
    Rejected(Error),
}

impl CertStore {
    /// A store reading `dir/tls.crt` and `dir/tls.key`; nothing is loaded until [`Self::poll`].
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            value: Reloadable::new(None),
            mark_key: Arc::new(KeyCell::default()),
        }
    }

    /// Put the mark key of every serving key loaded in `cell` (the initializer's).
    pub(crate) fn with_mark_key(mut self, cell: Arc<KeyCell>) -> Self {
        self.mark_key = cell;
        self
    }

    /// True once a certificate is in force.
    pub(crate) fn is_loaded(&self) -> bool {
        self.value.is_loaded()
    }

    /// The certificate in force.
    pub(crate) fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.value.current()
    }

    /// Read both files; swap in the pair when it changed and is valid. Blocking (small files).
    pub(crate) fn poll(&self) -> CertReload {
        let read = |name: &str| {
            let path = self.dir.join(name);
            std::fs::read(&path).map_err(|source| Error::ReadFile { path, source })
        };
        let pair = match (read(CERT_FILE), read(KEY_FILE)) {
            (Ok(c), Ok(k)) => (c, k),
            (Err(e), _) | (_, Err(e)) => return CertReload::Rejected(e),
        };
        let parse = |(cert, key): &(Vec<u8>, Vec<u8>)| {
            let certified = certified_key(&self.dir, cert, key, &self.provider)?;
            // The same parse of the same bytes as the operator's, which reads the key from the
            // Secret these files come from.
            let mark_key = initializer_mark::MarkKey::from_serving_key_pem(key).map_err(|e| {
                Error::LoadTls {
                    dir: self.dir.clone(),
                    message: format!("failed to derive the mark key from {KEY_FILE}: {e}"),
                }
            })?;
            self.mark_key.set(mark_key);
            Ok(certified)
        };
        match self.value.offer(pair, parse) {
            Offered::Unchanged => CertReload::Unchanged,
            Offered::Applied => CertReload::Applied,
            Offered::Rejected(e) => CertReload::Rejected(e),
        }
    }

    /// Poll and log what happened (each distinct error once); returns `"applied"` or
    /// `"rejected"` when something new happened.
    pub(crate) fn poll_and_log(&self) -> Option<&'static str> {
        self.value.poll_and_log(
            || match self.poll() {
                CertReload::Applied => Some(Ok(())),
                CertReload::Rejected(e) => Some(Err(e)),
                CertReload::Unchanged => None,
            },
            || tracing::info!(dir = ?self.dir, "serving certificate loaded"),
            |message| {
                tracing::warn!(error = %message, "serving certificate not (re)loaded; the previous one stays in force");
            },
        )
    }

    /// A rustls server configuration that resolves through this store, offering HTTP/1.1 (what
    /// the API server speaks to webhooks).
    pub(crate) fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(Error::BuildTls)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

fn certified_key(
    dir: &Path,
    cert: &[u8],
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let fail = |message: String| Error::LoadTls {
        dir: dir.to_owned(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("failed to parse {CERT_FILE}: {e}")))?;
    if chain.is_empty() {
        return Err(fail(format!("failed to find a certificate in {CERT_FILE}")));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
        pem::Error::NoItemsFound => fail(format!("failed to find a private key in {KEY_FILE}")),
        e => fail(format!("failed to parse {KEY_FILE}: {e}")),
    })?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| fail(format!("failed to pair the certificate and key: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_reported_once_not_at_every_poll() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path());
        assert_eq!(store.poll_and_log(), Some("rejected"));
        assert_eq!(store.poll_and_log(), None);
        assert!(!store.is_loaded());
        std::fs::write(dir.path().join(CERT_FILE), "not a certificate").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
        assert_eq!(store.poll_and_log(), Some("rejected"));
        assert_eq!(store.poll_and_log(), None);
        assert!(!store.is_loaded());
    }
}
