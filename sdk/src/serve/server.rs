//! The HTTPS server: `POST /initialize`, `GET /healthz`, `GET /readyz`, `GET /metrics` on one
//! listener, certificate and configuration reload, graceful shutdown, and the bounds that keep
//! a slow or greedy client from starving it (handshake, header, body and idle timeouts, a cap on
//! connections that makes room for newcomers instead of shutting them out: `slots`). In
//! controller mode (`--mode controller`) the same server runs beside the controller, and
//! `/readyz` also waits for its watches to list once.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::middleware::map_response_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::CONFIG_FILE;
use crate::controller::{self, Controller, Mode, Rules, Synced};
use crate::error::Error;
use crate::gate::AnnotationGate;
use crate::initializer::{DEFAULT_BODY_TIMEOUT, Initializer, too_large};
use crate::route::{Carried, ROUTE_CHECK_PATH};
use crate::serve::budget::{self, BodyAllowance, BodyBudget, Reservation, Shortfall, Sizes};
use crate::serve::conn::{BodyWatch, Limits, Tracked, Watched};
use crate::serve::repoll::Repoll;
use crate::serve::slots::{Admitted, Caps, Registry};
use crate::tls::CertStore;

/// Default port (matches the operator's process contract).
pub(crate) const DEFAULT_PORT: u16 = 8443;
/// Default TLS directory (matches the operator's process contract).
pub(crate) const DEFAULT_TLS_DIR: &str = "/etc/initializer/tls";
/// Default configuration directory (matches the operator's process contract).
pub(crate) const DEFAULT_CONFIG_DIR: &str = "/etc/initializer/config";
/// Path of the admission endpoint.
pub const INITIALIZE_PATH: &str = "/initialize";
/// Default time a client has for the TLS handshake, and for a request head from its first byte
/// (or from the handshake, for the first request): 10 s.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time an idle keep-alive connection is kept: 120 s, longer than the API server's own
/// idle timeout (90 s), so the API server closes first and never sends on a closing connection.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default cap on open connections. At the cap a new connection takes the slot of one running
/// no request (the oldest idle one of the peer holding the most), so whoever holds many idle
/// connections cannot keep the API server or the operator's probe out; it is refused only when
/// every connection runs a request or its peer already holds its share. At most this many
/// request bodies (each up to the request limit) are in memory at once.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default share of a full server one peer address may hold: 64 of 256, so filling the server
/// takes at least four addresses (pods), and a peer at its share is refused before any TLS work
/// rather than let push others out. Below the cap a peer may hold any number: the API server,
/// one address on most clusters, opens a connection per concurrent review.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 64;
/// Default time to keep serving after SIGTERM, with `/readyz` failing, before the listener
/// closes: 5 s, for the endpoint to leave the Service at the API server (the usual preStop delay).
pub const DEFAULT_SHUTDOWN_DELAY: Duration = Duration::from_secs(5);

/// The standard flags and environment of an initializer process. Flatten it into a binary's
/// own `clap` arguments with `#[command(flatten)]`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: $POD_IP:8443, or 0.0.0.0:8443 without POD_IP]. With
    /// POD_IP, the pod's loopback (same port) is served too where it is free.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Directory holding tls.crt and tls.key, reloaded when they change.
    #[arg(long, env = "TLS_DIR", default_value = DEFAULT_TLS_DIR)]
    pub tls_dir: PathBuf,
    /// Directory holding config.yaml, reloaded when it changes.
    #[arg(long, env = "CONFIG_DIR", default_value = DEFAULT_CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// Gate annotation: objects whose annotation is "false" are left alone.
    #[arg(long, env = "INITIALIZER_ANNOTATION")]
    pub annotation: Option<String>,
    /// Leave alone every object that does not carry the gate annotation.
    #[arg(long, env = "INITIALIZER_REQUIRE_ANNOTATION", value_parser = clap::builder::FalseyValueParser::new(), default_missing_value = "true", num_args = 0..=1)]
    pub require_annotation: bool,
    /// Name of this initializer (logs, metrics, initialized-by annotation).
    #[arg(long, env = "INITIALIZER_NAME")]
    pub name: Option<String>,
    /// The webhook's timeoutSeconds; the handler budget becomes this minus 500 ms.
    #[arg(long, env = "INITIALIZER_TIMEOUT_SECONDS")]
    pub timeout_seconds: Option<u64>,
    /// The Initializer's generation the pods were deployed from, written into the mark on
    /// every changed object (`<name>/<generation>`).
    #[arg(long, env = "INITIALIZER_GENERATION")]
    pub generation: Option<i64>,
    /// How often the TLS and configuration files are checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub reload_interval_ms: u64,
    /// How long in-flight requests may take to finish on shutdown, in seconds.
    #[arg(long, default_value_t = 20)]
    pub shutdown_grace_seconds: u64,
    /// After SIGTERM, how long to keep serving (with `/readyz` failing) before the listener
    /// closes, in seconds: the pod's endpoint takes a moment to leave the Service everywhere, and
    /// a call that reaches a pod that stopped listening fails the API server's create.
    #[arg(long, env = "INITIALIZER_SHUTDOWN_DELAY_SECONDS", default_value_t = DEFAULT_SHUTDOWN_DELAY.as_secs())]
    pub shutdown_delay_seconds: u64,
    /// Time for the TLS handshake, and for a request head from its first byte, in milliseconds.
    #[arg(long, env = "INITIALIZER_HEADER_TIMEOUT_MS", default_value_t = DEFAULT_HEADER_TIMEOUT.as_millis() as u64)]
    pub header_timeout_ms: u64,
    /// Time for a request body once its head arrived, in milliseconds (then HTTP 408).
    #[arg(long, env = "INITIALIZER_BODY_TIMEOUT_MS", default_value_t = DEFAULT_BODY_TIMEOUT.as_millis() as u64)]
    pub body_timeout_ms: u64,
    /// How long an idle keep-alive connection is kept, in seconds.
    #[arg(long, env = "INITIALIZER_IDLE_TIMEOUT_SECONDS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_seconds: u64,
    /// Most connections open at once; at the cap a newcomer takes the slot of the oldest idle
    /// connection of the peer holding the most.
    #[arg(long, env = "INITIALIZER_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most connections one peer address may hold once the server is full; its further
    /// connections are then refused.
    #[arg(long, env = "INITIALIZER_MAX_CONNECTIONS_PER_PEER", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    pub max_connections_per_peer: usize,
    /// The container's memory limit in bytes (the operator sets it from the pod's
    /// `limits.memory`); the cgroup's limit when that is smaller or this is unset, else 256 Mi
    /// is assumed. Request bodies may cost half of it at once, and those of one peer address a
    /// quarter of that.
    #[arg(long, env = "INITIALIZER_MEMORY_LIMIT")]
    pub memory_limit: Option<u64>,
    /// `webhook`: answer admission reviews on /initialize. `controller`: act on objects whose
    /// metadata.initializers.pending starts with --pending-name (Kubernetes 1.7–1.13).
    #[arg(long, env = "INITIALIZER_MODE", value_enum, default_value_t = Mode::Webhook)]
    pub mode: Mode,
    /// Controller mode: the fully qualified name looked for in `pending[0]` (required there).
    #[arg(long, env = "INITIALIZER_PENDING_NAME")]
    pub pending_name: Option<String>,
    /// Controller mode: the InitializerConfiguration's rules as a JSON array of
    /// {"apiGroups":[..],"apiVersions":[..],"resources":[..]}; every registered kind when absent.
    #[arg(long, env = "INITIALIZER_RULES", value_parser = controller::parse_rules)]
    pub rules: Option<Rules>,
    /// Controller mode: a LabelSelector (JSON) on the object's namespace, as a webhook's
    /// namespaceSelector; objects outside it get the name removed, unchanged.
    #[arg(long, env = "INITIALIZER_NAMESPACE_SELECTOR", value_parser = controller::parse_selector)]
    pub namespace_selector: Option<LabelSelector>,
    /// Controller mode: a LabelSelector (JSON) on the object's labels, as a webhook's
    /// objectSelector; objects outside it get the name removed, unchanged.
    #[arg(long, env = "INITIALIZER_OBJECT_SELECTOR", value_parser = controller::parse_selector)]
    pub object_selector: Option<LabelSelector>,
}

impl ServeArgs {
    /// Arguments for a server on `listen` with the given directories and nothing else set.
    pub fn new(
        listen: SocketAddr,
        tls_dir: impl Into<PathBuf>,
        config_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            listen: Some(listen),
            tls_dir: tls_dir.into(),
            config_dir: config_dir.into(),
            annotation: None,
            require_annotation: false,
            name: None,
            timeout_seconds: None,
            generation: None,
            reload_interval_ms: 1000,
            shutdown_grace_seconds: 20,
            shutdown_delay_seconds: DEFAULT_SHUTDOWN_DELAY.as_secs(),
            header_timeout_ms: DEFAULT_HEADER_TIMEOUT.as_millis() as u64,
            body_timeout_ms: DEFAULT_BODY_TIMEOUT.as_millis() as u64,
            idle_timeout_seconds: DEFAULT_IDLE_TIMEOUT.as_secs(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            memory_limit: None,
            mode: Mode::Webhook,
            pending_name: None,
            rules: None,
            namespace_selector: None,
            object_selector: None,
        }
    }

    /// The same arguments in controller mode, acting on objects pending on `pending_name`.
    pub fn controller(mut self, pending_name: impl Into<String>) -> Self {
        self.mode = Mode::Controller;
        self.pending_name = Some(pending_name.into());
        self
    }

    /// What the controller mode needs from these arguments; the pending name is required.
    fn controller_settings(
        &self,
        gate: Option<AnnotationGate>,
    ) -> Result<controller::Settings, Error> {
        let pending_name = self
            .pending_name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                Error::ControllerArgs(
                    "--pending-name (INITIALIZER_PENDING_NAME) is required with --mode controller"
                        .into(),
                )
            })?;
        if let Some(why) = controller::decide::pending_name_error(pending_name) {
            return Err(Error::ControllerArgs(format!("--pending-name: {why}")));
        }
        Ok(controller::Settings {
            pending_name: pending_name.to_owned(),
            rules: self.rules.as_ref().map(|r| r.0.clone()),
            scope: controller::decide::Scope {
                namespace_selector: self.namespace_selector.clone(),
                object_selector: self.object_selector.clone(),
                gate,
            },
        })
    }

    fn caps(&self) -> Caps {
        Caps {
            total: self.max_connections.max(1),
            per_peer: self.max_connections_per_peer.max(1),
        }
    }

    /// The request-body budget for bodies of up to `max_request` bytes.
    fn body_sizes(&self, max_request: usize) -> Sizes {
        Sizes::for_memory(
            budget::memory_limit(self.memory_limit, budget::cgroup_memory_limit()),
            max_request,
        )
    }

    fn limits(&self) -> Limits {
        Limits {
            header: Duration::from_millis(self.header_timeout_ms.max(1)),
            idle: Duration::from_secs(self.idle_timeout_seconds.max(1)),
        }
    }

    /// The address to listen on: `--listen`, else `$POD_IP:8443`, else `0.0.0.0:8443`.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr_with(std::env::var("POD_IP").ok().as_deref())
    }

    /// The loopback address served beside `$POD_IP:8443` (`127.0.0.1`, or `::1` for an IPv6
    /// `POD_IP`): where `kubectl port-forward` connects, inside the pod's own network namespace
    /// on a real kubelet. `None` with `--listen`, without `POD_IP`, or when `POD_IP` is itself a
    /// loopback address. Best effort: pods sharing their host's network (the sandbox, the node
    /// agent) find it taken by the first of them, and serve their own address only.
    pub fn loopback_addr(&self) -> Option<SocketAddr> {
        self.loopback_addr_with(std::env::var("POD_IP").ok().as_deref())
    }

    pub(crate) fn loopback_addr_with(&self, pod_ip: Option<&str>) -> Option<SocketAddr> {
        if self.listen.is_some() {
            return None;
        }
        let loopback = match pod_ip?.trim().parse::<IpAddr>().ok()? {
            ip if ip.is_loopback() => return None,
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        Some(SocketAddr::new(loopback, DEFAULT_PORT))
    }

    /// The address to listen on given the value of `POD_IP`.
    pub(crate) fn listen_addr_with(&self, pod_ip: Option<&str>) -> SocketAddr {
        if let Some(addr) = self.listen {
            return addr;
        }
        let ip = pod_ip
            .and_then(|ip| ip.trim().parse::<IpAddr>().ok())
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        SocketAddr::new(ip, DEFAULT_PORT)
    }

    /// The annotation gate these arguments describe.
    pub fn annotation_gate(&self) -> Option<AnnotationGate> {
        self.annotation
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| AnnotationGate::new(n, self.require_annotation))
    }
}

struct AppState<C> {
    initializer: Arc<Initializer<C>>,
    tls: Arc<CertStore>,
    terminating: Arc<AtomicBool>,
    /// Controller mode: whether every watch has listed once.
    synced: Option<Arc<Synced>>,
}

/// The HTTP routes of an initializer, without TLS or a socket.
pub(crate) fn router<C: DeserializeOwned + Send + Sync + 'static>(
    initializer: Initializer<C>,
    tls: Arc<CertStore>,
) -> Router {
    routes(
        Arc::new(initializer),
        tls,
        Arc::new(AtomicBool::new(false)),
        None,
    )
}

/// The routes, with `/readyz` failing once `terminating` is set.
fn routes<C: DeserializeOwned + Send + Sync + 'static>(
    initializer: Arc<Initializer<C>>,
    tls: Arc<CertStore>,
    terminating: Arc<AtomicBool>,
    synced: Option<Arc<Synced>>,
) -> Router {
    let state = Arc::new(AppState {
        initializer,
        tls,
        terminating: Arc::clone(&terminating),
        synced,
    });
    Router::new()
        .route(INITIALIZE_PATH, post(initialize::<C>))
        .route(ROUTE_CHECK_PATH, post(route_check::<C>))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<C>))
        .route("/metrics", get(metrics::<C>))
        .with_state(state)
        .layer(map_response_with_state(terminating, close_when_terminating))
}

/// Once terminating, every answer tells the client to close its connection. The API server
/// keeps connections to a pod alive, and one the server closed while idle can race the API
/// server's next request on it, which then fails the create (`EOF`). Closed after an answer
/// instead, each connection ends cleanly, and the next one goes through the Service, which no
/// longer lists this pod.
async fn close_when_terminating(
    State(terminating): State<Arc<AtomicBool>>,
    mut response: Response,
) -> Response {
    if terminating.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

async fn initialize<C: DeserializeOwned + Send + Sync + 'static>(
    State(state): State<Arc<AppState<C>>>,
    request: Request<Body>,
) -> Response {
    let (body, held) = match read_review(&state, request).await {
        Ok(read) => read,
        Err(rejected) => return rejected,
    };
    let answer = json_or_plain(state.initializer.review_json(&body).await);
    // The body and what the handler made of it are held until the answer is ready.
    drop((body, held));
    answer
}

/// The operator's route check ([`crate::route`]): no handler runs. The answer says which
/// connection carried the check and closes it, so that the next check comes on a connection
/// dialled after this one, through whatever admits the caller by then.
async fn route_check<C: DeserializeOwned + Send + Sync + 'static>(
    State(state): State<Arc<AppState<C>>>,
    request: Request<Body>,
) -> Response {
    let carried = request.extensions().get::<Carried>().copied();
    let mut answer = match read_review(&state, request).await {
        Ok((body, _held)) => json_or_plain(state.initializer.route_check_json(&body, carried)),
        Err(rejected) => rejected,
    };
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// The body of a review, read within the size limit, the body budget and the body timeout,
/// with the budget's reservation for it (none on a server of the caller's own: `into_router`),
/// held until the review is answered; the answer to send instead when it cannot be.
async fn read_review<C>(
    state: &AppState<C>,
    request: Request<Body>,
) -> Result<(axum::body::Bytes, Option<Reservation>), Response> {
    let limit = state.initializer.max_request_bytes;
    // While the body arrives the connection may be closed to make room (a slow sender must not
    // hold a slot a newcomer needs); dropped once it is read, or on any early answer.
    let reading = request
        .extensions()
        .get::<BodyWatch>()
        .map(BodyWatch::reading);
    let mut held = request
        .extensions()
        .get::<BodyAllowance>()
        .map(|a| a.budget.reservation(a.peer));
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(rejection(too_large(limit), state));
    }
    let read = collect_within(
        request.into_body(),
        declared.unwrap_or(limit),
        held.as_mut(),
    );
    let body = match tokio::time::timeout(state.initializer.body_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(unread)) => return Err(rejection(unread.rejection(limit), state)),
        Err(_) => {
            return Err(rejection(
                body_timed_out(state.initializer.body_timeout),
                state,
            ));
        }
    };
    if let Some(reservation) = held.as_mut() {
        reservation.arrived();
        reservation
            .grow_to(budget::decode_cost(&body))
            .await
            .map_err(|short| rejection(BodyRefused::Costly(short).rejection(limit), state))?;
    }
    drop(reading);
    Ok((body, held))
}

/// Why a body was not taken: not read whole, or too costly to decode.
enum BodyRefused {
    TooLarge,
    /// The client stopped sending it, or sent what is no HTTP body.
    Broken(String),
    /// The budget had no room for it.
    OverBudget(Shortfall),
    /// Cut off to make room for another client's body.
    CutOff,
    /// Read, but decoding it would cost more than the budget allows.
    Costly(Shortfall),
}

impl BodyRefused {
    fn rejection(self, limit: usize) -> crate::initializer::Rejection {
        use crate::initializer::Rejection;
        let over = |why: String| {
            Rejection::new(
                503,
                "over_budget",
                format!("failed to accept the review: {why}"),
            )
        };
        let full = |whose: &str| format!("{whose} the request bodies its memory allows; try again");
        match self {
            Self::TooLarge => too_large(limit),
            Self::Broken(why) => Rejection::new(
                400,
                "malformed",
                format!("failed to read the request body: {why}"),
            ),
            Self::OverBudget(Shortfall::PeerHoldsItsShare) => {
                over(full("this address already holds its share of"))
            }
            Self::OverBudget(Shortfall::ServerHoldsItsBudget) => {
                over(full("the server already holds"))
            }
            Self::CutOff => over(full(
                "cut off to make room for others: this address held most of",
            )),
            Self::Costly(short) => over(format!(
                "decoding it would take more memory than {} allows (a review of this many \
                 values and keys)",
                match short {
                    Shortfall::PeerHoldsItsShare => "this address's share of the budget",
                    Shortfall::ServerHoldsItsBudget => "the budget has left",
                }
            )),
        }
    }
}

/// The body's bytes, at most `room` of them (the declared length, else the request limit). A
/// body that comes in one piece, as a review mostly does, is kept as it came; one in several is
/// gathered in a buffer that grows by doubling up to `room`. What each piece or growth takes is
/// taken from `reservation` first, so the budget counts the memory the body takes.
async fn collect_within(
    mut body: Body,
    room: usize,
    mut reservation: Option<&mut Reservation>,
) -> Result<axum::body::Bytes, BodyRefused> {
    use http_body_util::BodyExt as _;
    /// The first allocation of a buffer, for a small review to fit in one.
    const FIRST: usize = 16 * 1024;
    let mut first: Option<axum::body::Bytes> = None;
    let mut bytes: Vec<u8> = Vec::new();
    loop {
        let frame = match reservation.as_deref() {
            Some(held) => tokio::select! {
                frame = body.frame() => frame,
                () = held.cut_off() => return Err(BodyRefused::CutOff),
            },
            None => body.frame().await,
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| BodyRefused::Broken(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let held_before = first.as_ref().map_or(bytes.len(), axum::body::Bytes::len);
        let needed = held_before + data.len();
        if needed > room {
            return Err(BodyRefused::TooLarge);
        }
        if first.is_none() && bytes.capacity() == 0 {
            if let Some(held) = reservation.as_deref_mut() {
                held.grow(data.len())
                    .await
                    .map_err(BodyRefused::OverBudget)?;
            }
            first = Some(data);
            continue;
        }
        if let Some(piece) = first.take() {
            // Its bytes are reserved already: the buffer starts at exactly their size.
            bytes = piece.to_vec();
        }
        if needed > bytes.capacity() {
            let grown = (bytes.capacity() * 2).max(FIRST).max(needed).min(room);
            if let Some(held) = reservation.as_deref_mut() {
                held.grow(grown - bytes.capacity())
                    .await
                    .map_err(BodyRefused::OverBudget)?;
            }
            bytes.reserve_exact(grown - bytes.len());
        }
        bytes.extend_from_slice(&data);
    }
    Ok(first.unwrap_or_else(|| axum::body::Bytes::from(bytes)))
}

/// A review's JSON answer, or the plain-text refusal of what was no review.
fn json_or_plain(answer: Result<Vec<u8>, crate::initializer::Rejection>) -> Response {
    match answer {
        Ok(json) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            json,
        )
            .into_response(),
        Err(rejected) => plain(rejected.status, rejected.message),
    }
}

fn body_timed_out(after: Duration) -> crate::initializer::Rejection {
    crate::initializer::Rejection::new(
        408,
        "body_timeout",
        format!("failed to read the request body within {after:?}"),
    )
}

fn rejection<C>(rejected: crate::initializer::Rejection, state: &AppState<C>) -> Response {
    state.initializer.metrics.observe_invalid(rejected.reason);
    plain(rejected.status, rejected.message)
}

fn plain(status: u16, message: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, message).into_response()
}

async fn readyz<C: DeserializeOwned + Send + Sync + 'static>(
    State(state): State<Arc<AppState<C>>>,
) -> Response {
    if state.terminating.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let tls = state.tls.is_loaded();
    let config = state.initializer.config_loaded();
    let watches = state.synced.as_ref().is_none_or(|s| s.is_synced());
    if tls && config && watches {
        (StatusCode::OK, "ok").into_response()
    } else {
        let mut missing = Vec::new();
        if !tls {
            missing.push("serving certificate");
        }
        if !config {
            missing.push("configuration");
        }
        if !watches {
            missing.push("the first list of every watched kind");
        }
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not loaded: {}", missing.join(", ")),
        )
            .into_response()
    }
}

async fn metrics<C: DeserializeOwned + Send + Sync + 'static>(
    State(state): State<Arc<AppState<C>>>,
) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        state.initializer.metrics.encode(),
    )
        .into_response()
}

/// A server bound and serving in the background; [`Server::shutdown`] drains and stops it.
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    terminating: Arc<AtomicBool>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    controller: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// The address the server listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Start terminating: `/readyz` fails from now on, so the pod leaves its Service's ready
    /// endpoints, while every request is still served until [`Server::shutdown`].
    pub fn begin_termination(&self) {
        self.terminating.store(true, Ordering::Relaxed);
    }

    /// Stop accepting connections, let in-flight requests finish, and return when done.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if let Some(controller) = self.controller
            && let Err(e) = controller.await
        {
            tracing::error!(error = %e, "controller task failed");
        }
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "server task failed");
        }
    }
}

impl<C: DeserializeOwned + Send + Sync + 'static> Initializer<C> {
    /// Apply the arguments (name, gate, budget, config dir), bind, and serve in the background
    /// as a webhook (whatever `args.mode` says; [`Initializer::run`] chooses by it).
    pub async fn bind(mut self, args: &ServeArgs) -> Result<Server, Error> {
        self.configure(args);
        Self::listen(Arc::new(self), args, None).await
    }

    /// Apply the arguments as [`bind`](Self::bind) does, serve `/healthz`, `/readyz` and
    /// `/metrics` (and `/initialize`) in the background, and run the controller mode with
    /// `client`: watch the kinds the rules match and act on objects pending on
    /// `args.pending_name` until [`Server::shutdown`].
    pub async fn bind_controller(
        mut self,
        args: &ServeArgs,
        client: kube::Client,
    ) -> Result<Server, Error> {
        self.configure(args);
        let settings = args.controller_settings(self.annotation_gate.clone())?;
        let initializer = Arc::new(self);
        let controller = Arc::new(Controller::new(Arc::clone(&initializer), client, settings));
        let mut server = Self::listen(initializer, args, Some(controller.synced())).await?;
        server.controller = Some(tokio::spawn(controller.run(server.shutdown.clone())));
        Ok(server)
    }

    fn configure(&mut self, args: &ServeArgs) {
        if let Some(name) = args.name.as_deref().filter(|n| !n.is_empty()) {
            self.name = Arc::from(name);
        }
        if args.generation.is_some() {
            self.generation = args.generation;
        }
        if !self.gate_set {
            self.annotation_gate = args.annotation_gate();
        }
        if let Some(seconds) = args.timeout_seconds {
            self.budget = Duration::from_secs(seconds)
                .saturating_sub(Duration::from_millis(500))
                .max(Duration::from_millis(100));
        }
        if !self.config.is_fixed() {
            self.config.set_path(args.config_dir.join(CONFIG_FILE));
        }
        self.body_timeout = Duration::from_millis(args.body_timeout_ms.max(1));
    }

    async fn listen(
        initializer: Arc<Self>,
        args: &ServeArgs,
        synced: Option<Arc<Synced>>,
    ) -> Result<Server, Error> {
        let shutdown = CancellationToken::new();
        let tls = Self::start_reloads(&initializer, args, shutdown.clone());
        let connection_metrics = Arc::clone(&initializer.metrics);

        let addr = args.listen_addr();
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let acceptor = TlsAcceptor::from(Arc::new(tls.server_config()?));

        let kinds: Vec<String> = initializer
            .kinds()
            .map(|k| match k.group.as_str() {
                "" => format!("{}/{}", k.version, k.kind),
                g => format!("{g}/{}/{}", k.version, k.kind),
            })
            .collect();
        let budget = BodyBudget::new(
            args.body_sizes(initializer.max_request_bytes),
            initializer.metrics.body_bytes(),
        );
        tracing::info!(
            %local_addr,
            initializer = %initializer.name,
            body_budget = ?budget.sizes(),
            ?kinds,
            annotation_gate = ?initializer.annotation_gate,
            budget = ?initializer.budget,
            mode = if synced.is_some() { "controller" } else { "webhook" },
            "serving"
        );
        let terminating = Arc::new(AtomicBool::new(false));
        let app = routes(
            initializer,
            Arc::clone(&tls),
            Arc::clone(&terminating),
            synced,
        );
        let grace = Duration::from_secs(args.shutdown_grace_seconds);
        let loopback = match args.loopback_addr() {
            Some(addr) => match TcpListener::bind(addr).await {
                Ok(listener) => Some(listener),
                Err(error) => {
                    tracing::debug!(%addr, %error, "not serving the loopback (shared network?)");
                    None
                }
            },
            None => None,
        };
        let serve = |listener| {
            accept_loop(
                Listener {
                    listener,
                    acceptor: acceptor.clone(),
                    limits: args.limits(),
                    caps: args.caps(),
                    budget: budget.clone(),
                    metrics: Arc::clone(&connection_metrics),
                },
                app.clone(),
                shutdown.clone(),
                grace,
            )
        };
        let main_loop = serve(listener);
        let task = match loopback {
            Some(loopback) => {
                let loopback_loop = serve(loopback);
                tokio::spawn(async move {
                    futures::future::join(main_loop, loopback_loop).await;
                })
            }
            None => tokio::spawn(main_loop),
        };
        Ok(Server {
            local_addr,
            terminating,
            shutdown,
            task,
            controller: None,
        })
    }

    /// The routes this server serves (`POST /initialize`, `GET /healthz`, `GET /readyz`,
    /// `GET /metrics`), for a server of your own, which terminates TLS and serves them where
    /// it likes. The arguments apply as for [`bind`](Self::bind), but for those about listening
    /// and connections, which are then yours to bound.
    ///
    /// `args.tls_dir` must still hold the serving key the API server's connections are made
    /// with (`tls.key`, as the operator mounts it): objects are marked with a key derived from
    /// it, so that the operator can tell them from forgeries, and `/readyz` answers 200 only
    /// once it and the configuration are loaded. Both are read now and polled every
    /// `args.reload_interval_ms` for as long as the router (or a clone) lives.
    ///
    /// Call it within a tokio runtime: the poll is a task.
    pub fn into_router(mut self, args: &ServeArgs) -> Router {
        self.configure(args);
        let initializer = Arc::new(self);
        // Cancelled by nothing: the poll ends when the routes, which hold the initializer and
        // the certificate store, are dropped.
        let tls = Self::start_reloads(&initializer, args, CancellationToken::new());
        routes(initializer, tls, Arc::new(AtomicBool::new(false)), None)
    }

    /// The serving certificate (and the mark's key) from `args.tls_dir`, and the configuration,
    /// read now and polled every `args.reload_interval_ms` until `stop` is cancelled or nothing
    /// else holds them.
    fn start_reloads(
        initializer: &Arc<Self>,
        args: &ServeArgs,
        stop: CancellationToken,
    ) -> Arc<CertStore> {
        let tls = Arc::new(
            CertStore::new(&args.tls_dir).with_mark_key(Arc::clone(&initializer.mark_key)),
        );
        let metrics = Arc::clone(&initializer.metrics);
        let record = move |what: &'static str, result: Option<&'static str>| {
            if let Some(result) = result {
                metrics.observe_reload(what, result);
            }
        };
        record("certificate", tls.poll_and_log());
        record("configuration", initializer.config.poll_and_log());

        let interval = Duration::from_millis(args.reload_interval_ms.max(10));
        let watched_config = Arc::downgrade(&initializer.config);
        let watched_tls = Arc::downgrade(&tls);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = ticker.tick() => {
                        let (Some(tls), Some(config)) = (watched_tls.upgrade(), watched_config.upgrade()) else {
                            break;
                        };
                        let record = record.clone();
                        let polled = tokio::task::spawn_blocking(move || {
                            record("certificate", tls.poll_and_log());
                            record("configuration", config.poll_and_log());
                        });
                        if let Err(e) = polled.await {
                            tracing::error!(error = %e, "reload poll failed");
                        }
                    }
                }
            }
        });
        tls
    }

    /// Serve until SIGTERM or SIGINT; then keep serving for the shutdown delay with `/readyz`
    /// failing (a second signal cuts it short), then drain in-flight requests and return.
    ///
    /// With `--mode controller` the client comes from `kube::Client::try_default()` (in the
    /// cluster, or `KUBECONFIG`), and the controller runs beside the server.
    pub async fn run(self, args: ServeArgs) -> Result<(), Error> {
        let server = match args.mode {
            Mode::Webhook => self.bind(&args).await?,
            Mode::Controller => {
                // Refuse bad flags before reaching for a cluster.
                args.controller_settings(None)?;
                let client = kube::Client::try_default().await.map_err(Error::Kube)?;
                self.bind_controller(&args, client).await?
            }
        };
        shutdown_signal().await?;
        let delay = Duration::from_secs(args.shutdown_delay_seconds);
        tracing::info!(
            delay_seconds = delay.as_secs(),
            "terminating: still serving while the endpoint leaves the Service"
        );
        server.begin_termination();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            signal = shutdown_signal() => signal?,
        }
        tracing::info!("shutting down: draining in-flight requests");
        server.shutdown().await;
        Ok(())
    }
}

/// Run `future` (typically [`Initializer::run`]) on a new multi-threaded runtime, then shut the
/// runtime down without waiting more than a second for handler threads still stuck past their
/// budget: a hung handler must not keep the process alive after SIGTERM. For `main`.
pub fn block_on<F: Future>(future: F) -> Result<F::Output, Error> {
    let runtime = webhook_runtime()?;
    let output = runtime.block_on(future);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(output)
}

/// The runtime [`block_on`] drives: sized for a webhook.
fn webhook_runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(webhook_workers(
            std::thread::available_parallelism().map_or(1, usize::from),
        ))
        .max_blocking_threads(WEBHOOK_BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

/// Most threads of the blocking pool, which only takes the handler runs that find no free
/// worker slot (and the reload poll): each thread costs a stack and a malloc arena. Beyond it,
/// runs wait in the pool's queue and the budget answers for them as for any slow handler.
const WEBHOOK_BLOCKING_THREADS: usize = 4;

/// Async workers for a webhook on `cpus` CPUs: one per CPU plus one. Handlers run as tasks on
/// all workers but one (see `lane`), so every CPU can run a handler while the spare worker
/// stays free for connections and timers; the spare costs an idle thread, not CPU. With one
/// worker per CPU, two CPUs had one handler slot: under saturating load a review often waited
/// for it, and throughput was 9 % lower at 12 % more CPU per review (A/B in sdk/README.md).
fn webhook_workers(cpus: usize) -> usize {
    cpus.max(1) + 1
}

async fn shutdown_signal() -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.map_err(Error::Signal)?,
    }
    Ok(())
}

/// The most a connection buffers of what it reads before the handler takes it: a request head
/// (the API server's are a few hundred bytes) or a piece of a body. hyper's default, about
/// 400 KiB, across the connection cap would hold more than the body budget does.
const READ_BUFFER: usize = 64 * 1024;

struct Listener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limits: Limits,
    caps: Caps,
    /// What request bodies draw on, across this server's listeners.
    budget: BodyBudget,
    /// Where connections closed because the server was full are counted.
    metrics: Arc<crate::metrics::Metrics>,
}

async fn accept_loop(
    listener: Listener,
    app: Router,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let Listener {
        listener,
        acceptor,
        limits,
        caps,
        budget,
        metrics,
    } = listener;
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only (the API server calls webhooks over HTTP/1.1, kubernetes#82090): one
    // header timeout then bounds every request, which HTTP/2's multiplexing would not allow.
    // The connection's watchdog (`conn::Activity`) enforces the header timeout: hyper's own
    // would arm and drop a timer for every request.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .max_buf_size(READ_BUFFER);
    let registry = Registry::new(caps);
    loop {
        // Accept whatever the cap: a full server makes room (or refuses) at once, so nobody waits
        // in the listen backlog behind connections that merely sit there.
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "failed to accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Admitted { slot, evicted } = match registry.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(why) => {
                // Dropping the socket closes it before any TLS work is spent on it.
                tracing::debug!(%peer, ?why, "connection refused: the server is full");
                metrics.observe_closed_when_full(why.reason());
                continue;
            }
        };
        if let Some(evicted) = evicted {
            tracing::debug!(%peer, %evicted, "closed an idle connection to make room");
            metrics.observe_closed_when_full("evicted");
        }
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "failed to set TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let allowance = BodyAllowance {
            budget: budget.clone(),
            peer: peer.ip(),
        };
        // Repoll: the connection wakes itself when its handler takes the request body; see
        // `repoll` for why that must not go through the scheduler.
        tokio::spawn(Repoll::new(async move {
            // Leaves the table when the connection ends, however it ends.
            let slot = slot;
            let handshake = tokio::time::timeout(limits.header, acceptor.accept(tcp));
            let tls = tokio::select! {
                () = slot.evicted.cancelled() => {
                    tracing::debug!(%peer, "connection closed during its handshake to make room");
                    return;
                }
                handshake = handshake => match handshake {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                },
            };
            let activity = Arc::clone(&slot.activity);
            activity.handshaken();
            let io = TokioIo::new(Watched::new(tls, Arc::clone(&activity)));
            let connection = builder
                .serve_connection(io, Tracked::new(service, Arc::clone(&activity), allowance));
            tokio::select! {
                ended = watcher.watch(connection) => if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                phase = activity.expired(limits) => {
                    tracing::debug!(%peer, ?phase, "connection closed: the client was too slow or idle too long");
                }
                () = slot.evicted.cancelled() => {
                    tracing::debug!(%peer, "connection closed to make room for a newcomer");
                }
            }
        }));
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "in-flight requests did not finish within the grace period"
        );
    }
}

#[cfg(test)]
mod tests;
