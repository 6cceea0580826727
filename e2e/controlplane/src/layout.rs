//! Where everything lives, and the command line of each component: pure functions of a
//! [`Layout`], so the flags that make this a faithful control plane are read and tested in one
//! place.
//!
//! Addresses are private to the network namespace: the API server advertises [`Layout::host_ip`]
//! (Kubernetes refuses loopback addresses for endpoints and the advertise address), pods get
//! addresses from [`Layout::pod_cidr`], which the namespace routes to its own loopback device,
//! and Service cluster IPs come from [`Layout::service_cidr`] (nothing routes them: there is no
//! kube-proxy, so the API server reaches webhooks and the service proxy through endpoints,
//! `--enable-aggregator-routing`).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The name the node agent registers its Node under.
pub const NODE_NAME: &str = "node-1";
/// The API server's secure port inside the namespace.
pub const API_PORT: u16 = 6443;
/// etcd's client port inside the namespace (loopback only).
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// etcd's peer port inside the namespace (loopback only; one member).
pub const ETCD_PEER_PORT: u16 = 2380;
/// The service-account token issuer.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Addresses and files of one control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The network namespace's name (`ip netns` names it under `/var/run/netns`).
    pub netns: String,
    /// The node's and the API server's address inside the namespace.
    pub host_ip: Ipv4Addr,
    /// Pod addresses, routed to the namespace's loopback device.
    pub pod_cidr: String,
    /// Service cluster IPs (`--service-cluster-ip-range`).
    pub service_cidr: String,
    /// The state directory: certificates, kubeconfigs, etcd's data, logs, pods' files.
    pub dir: PathBuf,
}

impl Layout {
    /// The default addresses, in the namespace `netns`, with files under `dir`.
    pub fn new(netns: impl Into<String>, dir: impl Into<PathBuf>) -> Self {
        Self {
            netns: netns.into(),
            host_ip: Ipv4Addr::new(10, 200, 0, 1),
            pod_cidr: "10.244.0.0/16".into(),
            service_cidr: "10.96.0.0/16".into(),
            dir: dir.into(),
        }
    }

    /// The API server's URL inside the namespace.
    pub fn api_url(&self) -> String {
        format!("https://{}:{API_PORT}", self.host_ip)
    }

    /// A file under the state directory's `pki/`.
    pub fn pki(&self, name: &str) -> PathBuf {
        self.dir.join("pki").join(name)
    }

    /// A component's log file.
    pub fn log(&self, component: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{component}.log"))
    }

    /// The kubeconfig of a component or user, reaching the API server at `server`.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.kubeconfig"))
    }

    /// The `ip` commands that prepare the namespace once it exists: loopback up, the host
    /// address on it, and the pod range routed locally (so a pod can listen on any address of
    /// it without one `ip addr add` per pod).
    pub fn netns_setup(&self) -> Vec<Vec<String>> {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        vec![
            words("link set lo up"),
            words(&format!("addr add {}/32 dev lo", self.host_ip)),
            words(&format!("route add local {} dev lo", self.pod_cidr)),
        ]
    }

    /// etcd: one member, data in the state directory, loopback only.
    pub fn etcd_args(&self) -> Vec<String> {
        let client = format!("http://127.0.0.1:{ETCD_CLIENT_PORT}");
        let peer = format!("http://127.0.0.1:{ETCD_PEER_PORT}");
        vec![
            "--name=etcd".into(),
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=etcd={peer}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ]
    }

    /// kube-apiserver: flags as envtest sets them, plus RBAC authorization, service-account
    /// token signing (so pods get real, bound tokens), and aggregator routing (webhooks and the
    /// service proxy reach endpoints directly: there is no kube-proxy). `version` is the
    /// API server's (`1.37.2`).
    pub fn apiserver_args(&self, version: &str) -> Vec<String> {
        let pki = |name: &str| self.pki(name).display().to_string();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}"),
            format!("--advertise-address={}", self.host_ip),
            "--bind-address=0.0.0.0".into(),
            format!("--secure-port={API_PORT}"),
            format!("--cert-dir={}", self.dir.join("pki").display()),
            format!("--tls-cert-file={}", pki("apiserver.crt")),
            format!("--tls-private-key-file={}", pki("apiserver.key")),
            format!("--client-ca-file={}", pki("ca.crt")),
            "--authorization-mode=RBAC".into(),
            // Fills the extension-apiserver-authentication ConfigMap the controller manager
            // reads; no client cert names the allowed front proxy, so no one can use it.
            format!("--requestheader-client-ca-file={}", pki("ca.crt")),
            "--requestheader-allowed-names=front-proxy-client".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!("--service-cluster-ip-range={}", self.service_cidr),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", pki("sa.pub")),
            format!("--service-account-signing-key-file={}", pki("sa.key")),
            "--enable-aggregator-routing=true".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        // MutatingAdmissionPolicy is served at v1 and on by default from 1.36. In 1.34 and 1.35
        // it is beta and off: its gate turns the admission plugin on, and the runtime config
        // serves its API (v1beta1, which also serves the deprecated v1beta1 of
        // ValidatingAdmissionPolicy; v1 stays the preferred version).
        if minor_of(version).is_some_and(|minor| minor < 36) {
            args.push("--feature-gates=MutatingAdmissionPolicy=true".into());
            args.push("--runtime-config=admissionregistration.k8s.io/v1beta1=true".into());
        }
        args
    }

    /// kube-controller-manager: every default controller (Deployment, ReplicaSet,
    /// EndpointSlice, Endpoints, garbage collector, namespace, service accounts, node
    /// lifecycle...), each with its own service-account credentials, leader election off.
    pub fn controller_manager_args(&self) -> Vec<String> {
        let kubeconfig = self.kubeconfig("controller-manager").display().to_string();
        vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=true".into(),
            format!(
                "--service-account-private-key-file={}",
                self.pki("sa.key").display()
            ),
            format!("--root-ca-file={}", self.pki("ca.crt").display()),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=10257".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]
    }

    /// The node agent: registers [`NODE_NAME`], binds and runs pods as processes.
    pub fn node_args(&self, image_map: Option<&Path>) -> Vec<String> {
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig("node").display()),
            format!("--node-name={NODE_NAME}"),
            format!("--host-ip={}", self.host_ip),
            format!("--pod-cidr={}", self.pod_cidr),
            format!("--state-dir={}", self.dir.join("node").display()),
            "--register-node".into(),
            format!("--api-server={}", self.api_url()),
        ];
        if let Some(map) = image_map {
            args.push(format!("--images={}", map.display()));
        }
        args
    }

    /// Every name the API server's certificate must cover: the forwarded loopback address,
    /// the address inside the namespace, the `kubernetes` Service's first cluster IP and its
    /// DNS names.
    pub fn apiserver_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        names.push(self.host_ip.to_string());
        if let Some(first) = first_service_ip(&self.service_cidr) {
            names.push(first.to_string());
        }
        names
    }
}

/// The minor of a `1.N.P` version.
fn minor_of(version: &str) -> Option<u32> {
    version
        .trim_start_matches('v')
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// The first usable address of a CIDR (the `kubernetes` Service's cluster IP).
pub fn first_service_ip(cidr: &str) -> Option<Ipv4Addr> {
    let (base, _) = cidr.split_once('/')?;
    let base: Ipv4Addr = base.parse().ok()?;
    Some(Ipv4Addr::from(u32::from(base).checked_add(1)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::new("initializer-test", "/state")
    }

    const BETA_POLICY_FLAGS: [&str; 2] = [
        "--feature-gates=MutatingAdmissionPolicy=true",
        "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
    ];

    #[test]
    fn the_api_server_authorizes_with_rbac_and_routes_to_endpoints() {
        let args = layout().apiserver_args("1.37.2");
        for flag in [
            "--authorization-mode=RBAC",
            "--enable-aggregator-routing=true",
            "--advertise-address=10.200.0.1",
            "--client-ca-file=/state/pki/ca.crt",
            "--service-account-signing-key-file=/state/pki/sa.key",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{flag} missing from {args:?}"
            );
        }
    }

    #[test]
    fn mutating_policies_need_flags_only_before_1_36() {
        for version in ["1.36.6", "1.37.2", "v1.38.0"] {
            let args = layout().apiserver_args(version);
            for flag in BETA_POLICY_FLAGS {
                assert!(
                    !args.iter().any(|a| a == flag),
                    "{version}: {flag} in {args:?}"
                );
            }
        }
        for version in ["1.34.13", "1.35.4"] {
            let args = layout().apiserver_args(version);
            for flag in BETA_POLICY_FLAGS {
                assert!(args.iter().any(|a| a == flag), "{version}: {flag} missing");
            }
        }
    }

    #[test]
    fn the_controller_manager_runs_without_leader_election_and_signs_tokens() {
        let args = layout().controller_manager_args();
        assert!(args.contains(&"--leader-elect=false".to_owned()));
        assert!(args.contains(&"--service-account-private-key-file=/state/pki/sa.key".to_owned()));
        assert!(args.contains(&"--use-service-account-credentials=true".to_owned()));
    }

    #[test]
    fn the_certificate_covers_the_forward_the_namespace_and_the_kubernetes_service() {
        let names = layout().apiserver_names();
        for name in [
            "127.0.0.1",
            "10.200.0.1",
            "10.96.0.1",
            "kubernetes.default.svc",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing");
        }
    }

    #[test]
    fn pod_addresses_are_routed_to_loopback_inside_the_namespace() {
        let setup = layout().netns_setup();
        assert_eq!(setup[0], ["link", "set", "lo", "up"]);
        assert_eq!(
            setup[2],
            ["route", "add", "local", "10.244.0.0/16", "dev", "lo"]
        );
    }

    #[test]
    fn no_address_is_loopback() {
        let layout = layout();
        assert!(!layout.host_ip.is_loopback());
        assert_eq!(
            first_service_ip(&layout.service_cidr),
            Some(Ipv4Addr::new(10, 96, 0, 1))
        );
    }
}
