//! The control plane's certificates and keys, made fresh for every start: one CA; the API
//! server's serving certificate; client certificates for the administrator, the controller
//! manager and the node agent; and the service-account signing key.
//!
//! Identities follow kubeadm: the administrator is in `system:masters`, the controller manager
//! is `system:kube-controller-manager` (bound by the API server's bootstrap RBAC), and the node
//! agent is `system:node:<name>` in `system:nodes` and, because it also binds pods to itself
//! (there is no scheduler) and reads every Secret it mounts, `system:masters`.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;
use crate::layout::Layout;

/// A client identity: common name (user) and organizations (groups).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// File stem under `pki/` and the kubeconfig's name.
    pub file: &'static str,
    pub user: String,
    pub groups: Vec<&'static str>,
}

/// The client identities the control plane hands out.
pub fn identities(node_name: &str) -> Vec<Identity> {
    vec![
        Identity {
            file: "admin",
            user: "kubernetes-admin".into(),
            groups: vec!["system:masters"],
        },
        Identity {
            file: "controller-manager",
            user: "system:kube-controller-manager".into(),
            groups: vec![],
        },
        Identity {
            file: "node",
            user: format!("system:node:{node_name}"),
            groups: vec!["system:nodes", "system:masters"],
        },
    ]
}

fn failed(what: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |source| Error::Certificates(format!("failed to make {what}: {source}"))
}

/// Writes every certificate and key under `layout.pki(..)`: `ca.crt`/`ca.key`,
/// `apiserver.crt`/`.key`, `<identity>.crt`/`.key`, and `sa.key`/`sa.pub`.
pub fn write_all(layout: &Layout, node_name: &str) -> Result<(), Error> {
    let dir = layout.dir.join("pki");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;

    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed("the CA"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "initializer-controlplane-ca");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(failed("the CA key"))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(failed("the CA"))?;
    write(&layout.pki("ca.crt"), &ca_cert.pem())?;
    write(&layout.pki("ca.key"), &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let mut serving =
        CertificateParams::new(layout.apiserver_names()).map_err(failed("the serving names"))?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.use_authority_key_identifier_extension = true;
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(failed("the serving key"))?;
    let cert = serving
        .signed_by(&key, &issuer)
        .map_err(failed("the serving certificate"))?;
    write(&layout.pki("apiserver.crt"), &cert.pem())?;
    write(&layout.pki("apiserver.key"), &key.serialize_pem())?;

    for identity in identities(node_name) {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(failed(identity.file))?;
        params
            .distinguished_name
            .push(DnType::CommonName, identity.user.as_str());
        for group in &identity.groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(failed(identity.file))?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(failed(identity.file))?;
        write(&layout.pki(&format!("{}.crt", identity.file)), &cert.pem())?;
        write(
            &layout.pki(&format!("{}.key", identity.file)),
            &key.serialize_pem(),
        )?;
    }

    // ECDSA P-256: the API server signs tokens with ES256 and verifies them with the public key.
    let signing = KeyPair::generate().map_err(failed("the service-account key"))?;
    write(&layout.pki("sa.key"), &signing.serialize_pem())?;
    write(&layout.pki("sa.pub"), &signing.public_key_pem())?;
    Ok(())
}

/// A kubeconfig for `identity` reaching the API server at `server`, with the files embedded so
/// it can be copied anywhere.
pub fn kubeconfig(layout: &Layout, identity: &Identity, server: &str) -> Result<String, Error> {
    let read = |name: String| -> Result<String, Error> {
        let path = layout.pki(&name);
        let text = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        Ok(base64(&text))
    };
    let ca = read("ca.crt".into())?;
    let cert = read(format!("{}.crt", identity.file))?;
    let key = read(format!("{}.key", identity.file))?;
    Ok(kubeconfig_text(
        "controlplane",
        server,
        &ca,
        identity.file,
        &format!("    client-certificate-data: {cert}\n    client-key-data: {key}\n"),
    ))
}

/// A kubeconfig with one cluster and one context, both named `cluster`, for `user` in the
/// `default` namespace; `ca` is base64 PEM and `credentials` the user's own lines (indented,
/// each ending in a newline). Both servers' kubeconfigs (client certificates here, tokens for
/// the legacy one) are this text.
pub(crate) fn kubeconfig_text(
    cluster: &str,
    server: &str,
    ca: &str,
    user: &str,
    credentials: &str,
) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
{credentials}contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {user}
    namespace: default
current-context: {cluster}
"
    )
}

/// Standard base64 (kubeconfig `*-data` fields).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Writes a file readable by its owner only (keys and kubeconfigs).
pub fn write(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_administrator_is_a_master_and_the_controller_manager_is_not() {
        let ids = identities("node-1");
        assert_eq!(ids[0].groups, ["system:masters"]);
        assert_eq!(ids[1].user, "system:kube-controller-manager");
        assert!(ids[1].groups.is_empty());
        assert_eq!(ids[2].user, "system:node:node-1");
    }

    #[test]
    fn every_file_is_written_and_a_kubeconfig_embeds_them() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new("t", dir.path());
        write_all(&layout, "node-1").unwrap();
        for file in ["ca.crt", "apiserver.key", "admin.crt", "node.key", "sa.pub"] {
            assert!(layout.pki(file).is_file(), "{file}");
        }
        let ids = identities("node-1");
        let text = kubeconfig(&layout, &ids[0], "https://127.0.0.1:1").unwrap();
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("controlplane"));
    }
}
