//! OLM for real: the operator installed, upgraded and removed by the Operator Lifecycle Manager
//! (`olm` and `catalog` from operator-lifecycle-manager, `opm` from operator-registry, all built
//! from their Go modules by `tools/olm/build.sh`), on the real control plane.
//!
//! No container runtime and no registry: `opm render <bundle directory>` makes a file-based
//! catalog whose bundles carry every manifest inline (`olm.bundle.object`) and no image, `opm
//! serve` serves it as a process, and a CatalogSource with `spec.address` points OLM at it. OLM
//! then builds the install steps from the inline objects, with neither a registry pod nor a
//! bundle-unpack Job. OLM's two operators run as processes with the administrator's kubeconfig;
//! the Deployment of our operator that OLM creates runs on the node agent like every other pod.
//!
//! On a cluster of real nodes (kind), OLM runs as pods instead ([`deploy_as_pods`]): one image
//! holding the same three binaries, its two operators as Deployments, and the same rendered
//! catalog served by `opm serve` behind a Service the CatalogSource names.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};
use tokio::process::{Child, Command};

use crate::paths;
use crate::wait::{self, Check};

/// The package, as the bundle's `metadata/annotations.yaml` names it.
pub const PACKAGE: &str = "initializer-operator";
/// The bundle's (default and only) channel.
pub const CHANNEL: &str = "candidate";
/// Where OLM's operators and the global catalog live.
pub const OLM_NAMESPACE: &str = "olm";
/// The namespace OLM's own install makes for operators installed cluster-wide.
pub const OPERATORS_NAMESPACE: &str = "operators";
/// The operator's namespace under OLM (the CSV's suggested namespace).
pub const OPERATOR_NAMESPACE: &str = "initializer-system";
/// Field manager of what the harness applies for OLM.
const FIELD_MANAGER: &str = "initializer-e2e-olm";
/// OLM's resync (`--interval`): it re-resolves Subscriptions at least this often, so an
/// upgrade served by a restarted `opm serve` is picked up within it even when the reconnect
/// itself does not trigger a resolution (the default, 15 min, is far too long for a test).
pub const OLM_INTERVAL: Duration = Duration::from_secs(10);

/// The version of the committed bundle: the workspace's.
pub const VERSION: &str = initializer_packaging::bundle::generate::VERSION;
/// The version the upgrade scenarios on the real control plane generate from the committed
/// bundle and move to.
pub const NEXT_VERSION: &str = "0.3.0";

/// The CSV's name for a version.
pub fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

/// Where the OLM binaries and OLM's CRDs are, once built.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `target/tools/olm/<olm>-<opm>/`.
    pub dir: PathBuf,
}

impl Tools {
    /// Builds them with `tools/olm/build.sh` (instant once built; `make olm` does it first).
    pub async fn build() -> anyhow::Result<Self> {
        let dir = paths::built_by_script("tools/olm/build.sh", "OLM and opm").await?;
        Ok(Self { dir })
    }

    /// `opm`.
    pub fn opm(&self) -> PathBuf {
        self.dir.join("opm")
    }

    /// OLM's CRDs (`deploy/chart/crds/` of its module).
    pub fn crds(&self) -> PathBuf {
        self.dir.join("crds")
    }

    /// prometheus-operator's CRDs of the kinds the bundle ships (PrometheusRule,
    /// ServiceMonitor), from its module.
    pub fn monitoring_crds(&self) -> PathBuf {
        self.dir.join("monitoring-crds")
    }
}

/// Writes the next version's bundle into `to`: the committed bundle with only the version
/// changed (the CSV's name, `spec.version`, the image tags) and `spec.replaces` naming the
/// committed version, as the release after this one would carry.
pub fn next_bundle(from: &Path, to: &Path) -> anyhow::Result<()> {
    copy_dir(from, to)?;
    let manifests = to.join("manifests");
    let csv = manifests.join(format!("{PACKAGE}.clusterserviceversion.yaml"));
    let text = std::fs::read_to_string(&csv)
        .with_context(|| format!("failed to read {}", csv.display()))?;
    let next = bump_csv(&text, VERSION, NEXT_VERSION)?;
    std::fs::write(&csv, next).with_context(|| format!("failed to write {}", csv.display()))?;
    Ok(())
}

/// The CSV text of `from` moved to `to`: its name, `spec.version` and every image tag of
/// `from`, with `spec.replaces` set to the CSV it upgrades.
pub fn bump_csv(text: &str, from: &str, to: &str) -> anyhow::Result<String> {
    let csv: serde_json::Value = serde_saphyr::from_str(text).context("failed to parse the CSV")?;
    let name = csv["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if name != csv_name(from) || csv["spec"]["version"].as_str() != Some(from) {
        bail!(
            "failed to bump the CSV: it is {name:?}, not {}",
            csv_name(from)
        );
    }
    // Text replacement of the tag (in JSON, whose layout never splits a string) keeps every
    // other value as committed; the name and version are then set and checked structurally.
    let retagged = serde_json::to_string(&csv)?.replace(&format!(":{from}"), &format!(":{to}"));
    let mut csv: serde_json::Value = serde_json::from_str(&retagged)?;
    csv["metadata"]["name"] = csv_name(to).into();
    csv["spec"]["version"] = to.into();
    csv["spec"]["replaces"] = csv_name(from).into();
    Ok(initializer_crds::yaml::to_string(&csv)?)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("failed to create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("failed to read {}", from.display()))?
    {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("failed to copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// One bundle in the channel: its directory, and the CSV it replaces.
#[derive(Clone, Debug)]
pub struct Entry {
    pub bundle: PathBuf,
    pub version: String,
    pub replaces: Option<String>,
}

/// The channel blob of the catalog, in the order of `entries`.
pub fn channel_yaml(entries: &[Entry]) -> String {
    let mut out = format!("schema: olm.channel\npackage: {PACKAGE}\nname: {CHANNEL}\nentries:\n");
    for entry in entries {
        out.push_str(&format!("  - name: {}\n", csv_name(&entry.version)));
        if let Some(replaces) = &entry.replaces {
            out.push_str(&format!("    replaces: {replaces}\n"));
        }
    }
    out
}

/// Renders the file-based catalog of `entries` into `dir/index.yaml` (the package, each bundle
/// as `opm render` gives it, the channel) and checks it with `opm validate`.
pub async fn render_catalog(tools: &Tools, entries: &[Entry], dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let mut index = opm(
        tools,
        &[
            "init",
            PACKAGE,
            &format!("--default-channel={CHANNEL}"),
            "--output",
            "yaml",
        ],
    )
    .await?;
    for entry in entries {
        let bundle = entry.bundle.display().to_string();
        // opm starts each document with its own `---`.
        index.push_str(&opm(tools, &["render", &bundle, "--output", "yaml"]).await?);
    }
    index.push_str("---\n");
    index.push_str(&channel_yaml(entries));
    let path = dir.join("index.yaml");
    std::fs::write(&path, index).with_context(|| format!("failed to write {}", path.display()))?;
    opm(tools, &["validate", &dir.display().to_string()]).await?;
    Ok(())
}

async fn opm(tools: &Tools, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(tools.opm())
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .context("failed to run opm")?;
    if !output.status.success() {
        bail!(
            "failed to run `opm {}`: {}\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A process the harness runs for OLM, killed when dropped; its output goes to a log file.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &'static str, command: &mut Command, log: PathBuf) -> anyhow::Result<Self> {
        let file = std::fs::File::create(&log)
            .with_context(|| format!("failed to create {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("failed to start {name}"))?;
        Ok(Self { name, child, log })
    }

    /// `Err` with the last log lines when it has exited.
    fn check(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(25).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("{} exited with {status}:\n{}", self.name, tail.join("\n"));
        }
        Ok(())
    }

    async fn stop(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// OLM running against the real control plane: its CRDs, namespaces and OLMConfig applied, its
/// two operators as processes, and `opm serve` serving our catalog.
pub struct Olm {
    tools: Tools,
    kubeconfig: PathBuf,
    state: tempfile::TempDir,
    olm: Process,
    catalog: Process,
    opm: Option<Process>,
    port: u16,
}

/// OLM's group and version of each kind the harness writes.
pub fn olm_resource(kind: &str) -> ApiResource {
    let version = match kind {
        "OperatorGroup" | "OLMConfig" => "v1",
        _ => "v1alpha1",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "operators.coreos.com",
        version,
        kind,
    ))
}

/// The API of an OLM kind in `namespace` (`None`: cluster-scoped).
pub fn olm_api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = olm_resource(kind);
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// OLM's CRDs (all 8, established), its namespaces and the OLMConfig: what OLM's own install
/// applies before its operators start, wherever they then run.
pub async fn install_apis(client: &Client, kubeconfig: &Path, tools: &Tools) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(tools.crds())
        .with_context(|| format!("failed to read {}", tools.crds().display()))?
    {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .with_context(|| format!("failed to parse {}", path.display()))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("failed to apply OLM's CRD {name}"))?;
        names.push(name);
    }
    if names.len() != 8 {
        bail!(
            "expected OLM's 8 CRDs in {}, found {names:?}",
            tools.crds().display()
        );
    }
    for name in &names {
        wait::until(
            format!("OLM's CRD {name} to be established"),
            Duration::from_secs(60),
            || async {
                let crd = crds.get(name).await?;
                let established = crd
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(if established {
                    Check::Done(())
                } else {
                    Check::Pending("not established".into())
                })
            },
        )
        .await?;
    }
    kubectl_apply(kubeconfig, OLM_OBJECTS).await
}

impl Olm {
    /// Applies OLM's CRDs, its namespaces and the OLMConfig, and starts `olm` and `catalog`
    /// with the administrator's `kubeconfig`.
    pub async fn start(client: &Client, kubeconfig: &Path, tools: Tools) -> anyhow::Result<Self> {
        install_apis(client, kubeconfig, &tools).await?;
        let state = paths::state_dir("olm", "the catalog and the logs of olm, catalog and opm")?;
        let (cert, key) = serving_pair(state.path())?;
        let interval = format!("{}s", OLM_INTERVAL.as_secs());
        let olm = Process::start(
            "olm",
            Command::new(tools.dir.join("olm"))
                .args(["--writeStatusName", "", "--interval", &interval])
                .env("KUBECONFIG", kubeconfig),
            state.path().join("olm.log"),
        )?;
        // Both serve health and metrics on :8080 unless given a certificate (then :8443).
        let catalog = Process::start(
            "catalog",
            Command::new(tools.dir.join("catalog"))
                .args([
                    "--namespace",
                    OLM_NAMESPACE,
                    "--writeStatusName",
                    "",
                    "--interval",
                    &interval,
                ])
                .arg("--tls-cert")
                .arg(&cert)
                .arg("--tls-key")
                .arg(&key)
                .arg("--kubeconfig")
                .arg(kubeconfig),
            state.path().join("catalog.log"),
        )?;
        let port = free_port()?;
        Ok(Self {
            tools,
            kubeconfig: kubeconfig.to_path_buf(),
            state,
            olm,
            catalog,
            opm: None,
            port,
        })
    }

    /// Renders the catalog of `entries` and (re)starts `opm serve` on it, on the same port each
    /// time, as a catalog image rolled to a new tag would be.
    pub async fn serve(&mut self, entries: &[Entry]) -> anyhow::Result<()> {
        if let Some(mut opm) = self.opm.take() {
            opm.stop().await;
        }
        let dir = self.state.path().join("catalog");
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        render_catalog(&self.tools, entries, &dir).await?;
        let log = self.state.path().join(format!("opm-{}.log", entries.len()));
        let mut opm = Process::start(
            "opm serve",
            Command::new(self.tools.opm())
                .arg("serve")
                .arg(&dir)
                .args(["--port", &self.port.to_string()])
                // Without a cache folder of its own, opm makes one in /tmp and leaves it
                // behind when stopped; in the state folder it goes with the harness.
                .arg("--cache-dir")
                .arg(self.state.path().join("opm-cache"))
                .arg("--cache-enforce-integrity=false"),
            log,
        )?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let started = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            opm.check()?;
            if started.elapsed() > Duration::from_secs(60) {
                bail!("opm serve did not listen on {addr} within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.opm = Some(opm);
        Ok(())
    }

    /// The address `opm serve` listens on, for the CatalogSource's `spec.address`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `Err` naming the first of OLM's processes that has exited.
    pub fn check(&mut self) -> anyhow::Result<()> {
        self.olm.check()?;
        self.catalog.check()?;
        if let Some(opm) = &mut self.opm {
            opm.check()?;
        }
        Ok(())
    }

    /// The administrator's kubeconfig OLM runs with.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the catalog and the logs are.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Stops `opm serve`, `catalog` and `olm`.
    pub async fn stop(mut self) {
        if let Some(mut opm) = self.opm.take() {
            opm.stop().await;
        }
        self.catalog.stop().await;
        self.olm.stop().await;
    }
}

/// OLM's namespaces and its cluster configuration, as its own install makes them; copied CSVs
/// off, so OLM does not copy our CSV into every namespace.
const OLM_OBJECTS: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: olm
---
apiVersion: v1
kind: Namespace
metadata:
  name: operators
---
apiVersion: operators.coreos.com/v1
kind: OLMConfig
metadata:
  name: cluster
spec:
  features:
    disableCopiedCSVs: true
";

/// Where OLM finds the catalog: an address `opm serve` listens on, or a catalog image OLM runs
/// itself (a release's).
#[derive(Clone, Copy, Debug)]
pub enum CatalogSource<'a> {
    /// The CatalogSource's `spec.address`.
    Address(&'a str),
    /// The CatalogSource's `spec.image`.
    Image(&'a str),
}

/// The objects that subscribe to the operator: the YAML of the book's OLM page
/// (`docs/src/install/olm.md`), with the catalog at `source`.
pub fn subscription_yaml(source: CatalogSource<'_>) -> String {
    const ADDRESS: &str = "127.0.0.1:50051";
    match source {
        CatalogSource::Address(address) => SUBSCRIPTION_YAML.replace(ADDRESS, address),
        CatalogSource::Image(image) => SUBSCRIPTION_YAML.replace(
            &format!("address: {ADDRESS}       # opm serve catalog --port 50051"),
            &format!("image: {image}"),
        ),
    }
}

/// Exactly the block of `docs/src/install/olm.md`; a test keeps the two equal.
pub const SUBSCRIPTION_YAML: &str = "\
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata:
  name: initializer-operator
  namespace: olm
spec:
  sourceType: grpc
  address: 127.0.0.1:50051       # opm serve catalog --port 50051
  displayName: Initializer Operator
---
apiVersion: v1
kind: Namespace
metadata:
  name: initializer-system
---
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata:
  name: initializer-operator
  namespace: initializer-system
spec: {}                         # no target namespaces: AllNamespaces, the only supported mode
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata:
  name: initializer-operator
  namespace: initializer-system
spec:
  channel: candidate
  name: initializer-operator
  source: initializer-operator
  sourceNamespace: olm
";

/// The removal commands of the book's uninstall page (`docs/src/install/uninstall.md`, section
/// "OLM"), run as they are; a test keeps the two equal.
pub const REMOVAL_COMMANDS: &str = "\
kubectl get initializers -o name \\
  | xargs -r -I{} kubectl patch {} --type merge -p '{\"spec\":{\"suspend\":true}}'
kubectl wait initializers --all --for=jsonpath='{.status.phase}'=Suspended --timeout=60s
kubectl get mutatingwebhookconfigurations -l app.kubernetes.io/managed-by=initializer-operator  # none left
kubectl delete subscription initializer-operator -n initializer-system
kubectl delete csv -n initializer-system -l operators.coreos.com/initializer-operator.initializer-system
";

/// Runs `script` with bash (`-euo pipefail`) against `kubeconfig`; returns its output.
pub async fn run_shell(kubeconfig: &Path, script: &str) -> anyhow::Result<String> {
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("KUBECONFIG", kubeconfig)
        .kill_on_drop(true)
        .output()
        .await
        .context("failed to run bash")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("failed to run:\n{script}\n{}: {text}", output.status);
    }
    Ok(text)
}

/// `kubectl apply -f -` of `yaml` against `kubeconfig`.
pub async fn kubectl_apply(kubeconfig: &Path, yaml: &str) -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("failed to run kubectl (is it installed?)")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(yaml.as_bytes()).await?;
    }
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        bail!(
            "failed to `kubectl apply`:\n{yaml}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A self-signed serving pair for `catalog`'s health endpoint, so it moves off `olm`'s :8080.
fn serving_pair(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .context("failed to make a serving certificate")?;
    let cert = dir.join("catalog.crt");
    let key = dir.join("catalog.key");
    std::fs::write(&cert, pair.cert.pem())?;
    std::fs::write(&key, pair.signing_key.serialize_pem())?;
    Ok((cert, key))
}

fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind(("127.0.0.1", 0)).context("failed to find a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The Service the catalog is served behind when OLM runs as pods.
pub const CATALOG_SERVICE: &str = "initializer-catalog";
/// The port `opm serve` listens on, in its pod and on its Service.
pub const CATALOG_PORT: u16 = 50051;

/// The CatalogSource's `spec.address` when the catalog is a Service in OLM's namespace.
pub fn catalog_service_address() -> String {
    format!("{CATALOG_SERVICE}.{OLM_NAMESPACE}.svc:{CATALOG_PORT}")
}

/// OLM's two operators as Deployments in `olm`, from `image` (`olm`, `catalog` and `opm`, the
/// binaries `tools/olm/build.sh` builds, on the runtime base: `e2e/kind/olm.Dockerfile`), with
/// the account and the all-powerful ClusterRole OLM's own install gives them (OLM installs
/// operators, so it holds every right it may grant), and the same flags as the processes of
/// [`Olm::start`]. The image is loaded into the nodes, never pulled.
pub fn operators_yaml(image: &str) -> String {
    let interval = format!("{}s", OLM_INTERVAL.as_secs());
    let deployment = |name: &str, binary: &str, args: &[&str]| {
        let args = args
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "\
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {OLM_NAMESPACE}
  labels: {{app: {name}}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      serviceAccountName: olm-operator-serviceaccount
      containers:
        - name: {name}
          image: {image}
          imagePullPolicy: Never
          command: [/usr/local/bin/{binary}]
          args: [{args}]
          env:
            - name: OPERATOR_NAMESPACE
              valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}
            - name: OPERATOR_NAME
              value: {name}
          readinessProbe:
            httpGet: {{path: /healthz, port: 8080}}
            periodSeconds: 2
"
        )
    };
    format!(
        "\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: olm-operator-serviceaccount
  namespace: {OLM_NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:controller:operator-lifecycle-manager
rules:
  - apiGroups: ['*']
    resources: ['*']
    verbs: ['*']
  - nonResourceURLs: ['*']
    verbs: ['*']
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: olm-operator-binding-{OLM_NAMESPACE}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:controller:operator-lifecycle-manager
subjects:
  - kind: ServiceAccount
    name: olm-operator-serviceaccount
    namespace: {OLM_NAMESPACE}
{}{}",
        deployment(
            "olm-operator",
            "olm",
            &["--writeStatusName", "", "--interval", &interval]
        ),
        deployment(
            "catalog-operator",
            "catalog",
            &[
                "--namespace",
                OLM_NAMESPACE,
                "--writeStatusName",
                "",
                "--interval",
                &interval,
                // The bundle unpack Job's images: opm's, and the one holding `cpb` and `cp`.
                "--opmImage",
                image,
                "--util-image",
                image,
            ]
        ),
    )
}

/// The catalog as a Service: `opm serve` in a Deployment from `image`, on the rendered catalog
/// (the ConfigMap [`CATALOG_SERVICE`], key `index.yaml`, mounted as one file: a whole-volume
/// mount would also show opm the ConfigMap's timestamped copy, and with it every package
/// twice), ready when it answers gRPC's health check.
pub fn catalog_yaml(image: &str) -> String {
    format!(
        "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {CATALOG_SERVICE}
  namespace: {OLM_NAMESPACE}
  labels: {{app: {CATALOG_SERVICE}}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {CATALOG_SERVICE}}}
  template:
    metadata:
      labels: {{app: {CATALOG_SERVICE}}}
    spec:
      containers:
        - name: opm
          image: {image}
          imagePullPolicy: Never
          command: [/usr/local/bin/opm]
          args: [serve, /catalog, --port, \"{CATALOG_PORT}\", --cache-dir, /tmp/cache, --cache-enforce-integrity=false]
          ports:
            - {{name: grpc, containerPort: {CATALOG_PORT}}}
          readinessProbe:
            grpc: {{port: {CATALOG_PORT}}}
            periodSeconds: 2
          volumeMounts:
            - {{name: catalog, mountPath: /catalog/index.yaml, subPath: index.yaml, readOnly: true}}
            - {{name: cache, mountPath: /tmp}}
      volumes:
        - name: catalog
          configMap: {{name: {CATALOG_SERVICE}}}
        - name: cache
          emptyDir: {{}}
---
apiVersion: v1
kind: Service
metadata:
  name: {CATALOG_SERVICE}
  namespace: {OLM_NAMESPACE}
spec:
  selector: {{app: {CATALOG_SERVICE}}}
  ports:
    - {{name: grpc, port: {CATALOG_PORT}, targetPort: grpc}}
"
    )
}

/// OLM running as pods on a cluster of real nodes (kind): its APIs and its two operators, each
/// Deployment Available; with `entries`, also their catalog behind a Service (without, OLM
/// runs a catalog image a CatalogSource names).
pub async fn deploy_as_pods(
    client: &Client,
    kubeconfig: &Path,
    tools: &Tools,
    image: &str,
    entries: Option<&[Entry]>,
) -> anyhow::Result<()> {
    install_apis(client, kubeconfig, tools).await?;
    kubectl_apply(kubeconfig, &operators_yaml(image)).await?;
    let mut names = vec!["olm-operator", "catalog-operator"];
    if let Some(entries) = entries {
        serve_catalog(client, kubeconfig, tools, image, entries).await?;
        names.push(CATALOG_SERVICE);
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OLM_NAMESPACE);
    for name in names {
        wait::until(
            format!("OLM's Deployment {name} to be available"),
            Duration::from_secs(180),
            || async {
                let deployment = deployments.get(name).await?;
                let available = deployment
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| {
                        c.type_.as_deref() == Some("Available")
                            && c.status.as_deref() == Some("True")
                    });
                Ok(if available {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{:?}", deployment.status))
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// The catalog of `entries`, rendered, in a ConfigMap that `opm serve` (in a Deployment from
/// `image`) serves behind the Service [`CATALOG_SERVICE`].
async fn serve_catalog(
    client: &Client,
    kubeconfig: &Path,
    tools: &Tools,
    image: &str,
    entries: &[Entry],
) -> anyhow::Result<()> {
    let rendered = tempfile::tempdir()?;
    render_catalog(tools, entries, rendered.path()).await?;
    let index = std::fs::read_to_string(rendered.path().join("index.yaml"))?;
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CATALOG_SERVICE.into()),
            namespace: Some(OLM_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some([("index.yaml".to_string(), index)].into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), OLM_NAMESPACE)
        .patch(
            CATALOG_SERVICE,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&config_map),
        )
        .await
        .context("failed to apply the catalog's ConfigMap")?;
    kubectl_apply(kubeconfig, &catalog_yaml(image)).await
}

/// A CSV's `status.phase`.
pub fn csv_phase(csv: &DynamicObject) -> Option<String> {
    csv.data["status"]["phase"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests;
