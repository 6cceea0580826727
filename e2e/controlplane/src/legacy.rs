//! kube-apiserver v1.13.3, of the last minor with Initializers, for the legacy conformance tier.
//!
//! `tools/legacy-apiserver/build.sh` builds the binary into `target/tools/kube-apiserver-1.13`
//! (`make legacy-apiserver`); etcd is the control plane's own (v3.6.5, which 1.13's etcd client
//! v3.3.10 speaks to over the v3 API, as `tools/legacy-apiserver/README.md` records). Both run
//! as plain processes on free loopback ports with their files in a state directory: no
//! kube-controller-manager 1.13 exists here, so there are no pods and no network namespace is
//! needed.
//!
//! The server authenticates bearer tokens (`--token-auth-file`) and authorizes with RBAC: an
//! admin token (`system:masters`) and an unprivileged one (a user in no group, who may do only
//! what a test grants it), so that the `initialize` verb the era's admission plugin checked
//! (`canInitialize` in `k8s.io/apiserver/pkg/admission/plugin/initialization/initialization.go`,
//! 1.13) can be tested. Initializers are on: `--enable-admission-plugins=Initializers` and
//! `--runtime-config=admissionregistration.k8s.io/v1alpha1=true`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), initializer_controlplane::Error> {
//! use initializer_controlplane::{LegacyApiServer, LegacyConfig};
//! let server = LegacyApiServer::start(LegacyConfig::new("/tmp/legacy")).await?;
//! let admin = server.client();
//! server.shutdown().await; // or drop it: the processes are killed
//! # Ok(()) }
//! ```

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kube::Client;

use crate::component::Component;
use crate::layout::Layout;
use crate::{Error, binaries, client_for, http_get, pki};

/// The Kubernetes version the legacy binary is.
pub const LEGACY_VERSION: &str = "1.13.3";
/// The user name of the admin token (in `system:masters`).
pub const ADMIN_USER: &str = "legacy-admin";
/// The user name of the unprivileged token (in no group: RBAC grants it nothing by itself).
pub const UNPRIVILEGED_USER: &str = "legacy-user";
/// How long the API server may take to answer `/healthz` (7–9 s measured: RBAC bootstrap).
const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(90);

/// What to start.
#[derive(Clone, Debug)]
pub struct LegacyConfig {
    /// Certificates, tokens, kubeconfigs, etcd's data and logs (`logs/<component>.log`).
    pub state_dir: PathBuf,
}

impl LegacyConfig {
    /// Files under `state_dir`, binaries from the workspace's `target/`
    /// ([`binaries::workspace_target`]).
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
        }
    }
}

/// The loopback ports of one legacy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegacyPorts {
    /// etcd's client port.
    pub etcd_client: u16,
    /// etcd's peer port (one member).
    pub etcd_peer: u16,
    /// The API server's secure port.
    pub api: u16,
}

/// The two bearer tokens the server accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyTokens {
    /// [`ADMIN_USER`]'s token, in `system:masters`.
    pub admin: String,
    /// [`UNPRIVILEGED_USER`]'s token, in no group.
    pub unprivileged: String,
}

impl LegacyTokens {
    /// Two fresh random tokens.
    pub fn random() -> Self {
        Self {
            admin: random_token(),
            unprivileged: random_token(),
        }
    }

    /// The `--token-auth-file` text: `token,user,uid[,"groups"]` per line.
    pub fn auth_file(&self) -> String {
        format!(
            "{},{ADMIN_USER},{ADMIN_USER},system:masters\n{},{UNPRIVILEGED_USER},{UNPRIVILEGED_USER}\n",
            self.admin, self.unprivileged
        )
    }
}

fn random_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
        .collect()
}

/// etcd's flags: one member on `ports`, data under `dir`.
pub fn etcd_args(dir: &Path, ports: LegacyPorts) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        "--name=legacy".into(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        "--initial-cluster=legacy=".to_owned() + &peer,
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// kube-apiserver 1.13's flags (those `tools/legacy-apiserver/README.md` ran with), serving
/// the certificate under `dir/pki` on loopback, tokens from `dir/tokens.csv`, RBAC, and the
/// Initializers admission plugin with the v1alpha1 API it needs.
pub fn apiserver_args(dir: &Path, ports: LegacyPorts) -> Vec<String> {
    let pki = |name: &str| dir.join("pki").join(name).display().to_string();
    vec![
        format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.api),
        // 1.13 still opens the unauthenticated port 8080 unless told not to.
        "--insecure-port=0".into(),
        format!("--cert-dir={}", dir.join("pki").display()),
        format!("--tls-cert-file={}", pki("apiserver.crt")),
        format!("--tls-private-key-file={}", pki("apiserver.key")),
        format!("--token-auth-file={}", dir.join("tokens.csv").display()),
        "--authorization-mode=RBAC".into(),
        "--service-cluster-ip-range=10.96.0.0/24".into(),
        "--enable-admission-plugins=Initializers".into(),
        "--runtime-config=admissionregistration.k8s.io/v1alpha1=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ]
}

/// A kubeconfig reaching `server` with a bearer `token`, trusting the CA (PEM) `ca_pem`.
pub fn token_kubeconfig(server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    crate::pki::kubeconfig_text(
        "legacy",
        server,
        &ca,
        user,
        &format!("    token: {token}\n"),
    )
}

/// A free loopback port (the kernel's choice; free when this returns, taken by the component
/// a moment later).
fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|source| Error::Forward { port: 0, source })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| Error::Forward { port: 0, source })
}

/// The legacy binary: `target/tools/kube-apiserver-1.13`, built first by
/// `tools/legacy-apiserver/build.sh` when missing (minutes cold; the script returns at once
/// when built). `LEGACY_APISERVER` names another binary.
pub fn locate_apiserver() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("LEGACY_APISERVER").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let cache = binaries::workspace_target().join("tools");
    let built = cache.join("kube-apiserver-1.13");
    if built.is_file() && cache.join("legacy-apiserver").join(".complete").is_file() {
        return Ok(built);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap_or(Path::new("."))
        .join("tools/legacy-apiserver/build.sh");
    eprintln!("legacy: building kube-apiserver v{LEGACY_VERSION} (`make legacy-apiserver`)");
    let status = Command::new(&script)
        .env("LEGACY_APISERVER_CACHE", &cache)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| Error::Build(format!("failed to run {}: {e}", script.display())))?;
    if !status.success() {
        return Err(Error::Build(format!(
            "{} exited with {status}",
            script.display()
        )));
    }
    Ok(built)
}

/// A running etcd and kube-apiserver 1.13.
pub struct LegacyApiServer {
    dir: PathBuf,
    components: Vec<Component>,
    client: Client,
    unprivileged: Client,
    kubeconfig: PathBuf,
    unprivileged_kubeconfig: PathBuf,
    address: SocketAddr,
    healthy_after: Duration,
}

impl LegacyApiServer {
    /// Locates (or builds) the binaries, writes the certificates, tokens and kubeconfigs,
    /// starts etcd and the API server, and returns once `/healthz` answers `ok`.
    pub async fn start(config: LegacyConfig) -> Result<Self, Error> {
        let etcd = binaries::locate()?.etcd;
        let apiserver = locate_apiserver()?;
        std::fs::create_dir_all(&config.state_dir).map_err(|e| Error::io(&config.state_dir, e))?;
        let dir = std::fs::canonicalize(&config.state_dir)
            .map_err(|e| Error::io(&config.state_dir, e))?;
        // The serving certificate covers 127.0.0.1 among the control plane's names.
        let layout = Layout::new("", &dir);
        pki::write_all(&layout, crate::layout::NODE_NAME)?;
        let tokens = LegacyTokens::random();
        pki::write(&dir.join("tokens.csv"), &tokens.auth_file())?;
        let ports = LegacyPorts {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            api: free_port()?,
        };
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, ports.api));
        let server = format!("https://{address}");
        let ca_path = layout.pki("ca.crt");
        let ca = std::fs::read_to_string(&ca_path).map_err(|e| Error::io(&ca_path, e))?;
        let admin_text = token_kubeconfig(&server, &ca, ADMIN_USER, &tokens.admin);
        let user_text = token_kubeconfig(&server, &ca, UNPRIVILEGED_USER, &tokens.unprivileged);
        let kubeconfig = dir.join("admin.kubeconfig");
        let unprivileged_kubeconfig = dir.join("unprivileged.kubeconfig");
        pki::write(&kubeconfig, &admin_text)?;
        pki::write(&unprivileged_kubeconfig, &user_text)?;
        let client = client_for(&admin_text).await?;
        let unprivileged = client_for(&user_text).await?;

        let started = Instant::now();
        let log = |name: &str| dir.join("logs").join(format!("{name}.log"));
        let mut components = vec![Component::start(
            "etcd",
            &[],
            &etcd,
            &etcd_args(&dir, ports),
            &log("etcd"),
        )?];
        match Component::start(
            "kube-apiserver",
            &[],
            &apiserver,
            &apiserver_args(&dir, ports),
            &log("kube-apiserver"),
        ) {
            Ok(component) => components.push(component),
            Err(err) => {
                for component in &components {
                    component.stop().await;
                }
                return Err(err);
            }
        }
        let mut server = Self {
            dir,
            components,
            client,
            unprivileged,
            kubeconfig,
            unprivileged_kubeconfig,
            address,
            healthy_after: Duration::ZERO,
        };
        if let Err(err) = server.wait_healthy().await {
            server.stop_all().await;
            return Err(err);
        }
        server.healthy_after = started.elapsed();
        Ok(server)
    }

    /// A client with the admin token (`system:masters`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client with the unprivileged token ([`UNPRIVILEGED_USER`], in no group).
    pub fn unprivileged_client(&self) -> Client {
        self.unprivileged.clone()
    }

    /// The admin kubeconfig (for kubectl and child processes).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The unprivileged user's kubeconfig.
    pub fn unprivileged_kubeconfig_path(&self) -> &Path {
        &self.unprivileged_kubeconfig
    }

    /// Where the API server listens: `127.0.0.1:PORT`.
    pub fn api_address(&self) -> SocketAddr {
        self.address
    }

    /// The state directory (logs under `logs/`).
    pub fn state_dir(&self) -> &Path {
        &self.dir
    }

    /// From the first process started to `/healthz` answering `ok`.
    pub fn healthy_after(&self) -> Duration {
        self.healthy_after
    }

    /// `Err(Error::Died { .. })` naming the first process that has exited.
    pub fn check(&self) -> Result<(), Error> {
        self.components.iter().try_for_each(Component::check)
    }

    /// Stops the API server, then etcd (SIGTERM, then SIGKILL after a grace period).
    pub async fn shutdown(mut self) {
        self.stop_all().await;
    }

    async fn stop_all(&mut self) {
        for component in self.components.iter().rev() {
            component.stop().await;
        }
        self.components.clear();
    }

    async fn wait_healthy(&self) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            self.check()?;
            let last = match self.client.request_text(http_get("/healthz")).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if started.elapsed() > HEALTHZ_TIMEOUT {
                return Err(Error::NotReady {
                    what: "kube-apiserver 1.13's /healthz",
                    seconds: HEALTHZ_TIMEOUT.as_secs(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for LegacyApiServer {
    // A test that panics or returns early must not leave an API server behind: the processes
    // run detached from the tokio task that waits for them, so kill them here.
    fn drop(&mut self) {
        for component in self.components.iter().rev() {
            if component.check().is_ok()
                && let Some(pid) = rustix::process::Pid::from_raw(component.pid().cast_signed())
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTS: LegacyPorts = LegacyPorts {
        etcd_client: 23790,
        etcd_peer: 23800,
        api: 16443,
    };

    #[test]
    fn the_api_server_runs_initializers_with_tokens_and_rbac_on_loopback_only() {
        let args = apiserver_args(Path::new("/s"), PORTS);
        for flag in [
            "--enable-admission-plugins=Initializers",
            "--runtime-config=admissionregistration.k8s.io/v1alpha1=true",
            "--authorization-mode=RBAC",
            "--token-auth-file=/s/tokens.csv",
            "--insecure-port=0",
            "--bind-address=127.0.0.1",
            "--secure-port=16443",
            "--etcd-servers=http://127.0.0.1:23790",
            "--tls-cert-file=/s/pki/apiserver.crt",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{flag} missing from {args:?}"
            );
        }
    }

    #[test]
    fn etcd_is_one_member_on_the_chosen_ports() {
        let args = etcd_args(Path::new("/s"), PORTS);
        assert!(args.contains(&"--listen-client-urls=http://127.0.0.1:23790".to_owned()));
        assert!(args.contains(&"--initial-cluster=legacy=http://127.0.0.1:23800".to_owned()));
        assert!(args.contains(&"--data-dir=/s/etcd".to_owned()));
    }

    #[test]
    fn only_the_admin_token_is_in_system_masters() {
        let tokens = LegacyTokens {
            admin: "a1".into(),
            unprivileged: "u1".into(),
        };
        let text = tokens.auth_file();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "a1,legacy-admin,legacy-admin,system:masters",
                "u1,legacy-user,legacy-user"
            ]
        );
        let fresh = LegacyTokens::random();
        assert_eq!(fresh.admin.len(), 32);
        assert_ne!(fresh.admin, fresh.unprivileged);
    }

    #[test]
    fn the_kubeconfig_carries_the_token_and_the_ca() {
        let text = token_kubeconfig("https://127.0.0.1:1", "PEM", "u", "t0k");
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(parsed.auth_infos[0].name, "u");
        assert!(text.contains("    token: t0k\n"), "{text}");
        assert_eq!(parsed.current_context.as_deref(), Some("legacy"));
        assert!(
            text.ends_with("    token: t0k\ncontexts:\n- name: legacy\n  context:\n    cluster: legacy\n    user: u\n    namespace: default\ncurrent-context: legacy\n"),
            "{text}"
        );
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:1"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("UEVN"));
    }
}
