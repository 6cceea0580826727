//! `initializer-baseline`: the hand-written admission webhook the benchmark measures the SDK
//! against (see [`initializer_load::baseline`]). `POST /mutate`, `GET /readyz`, HTTPS. With
//! `--floor`, its no-work floor: the same server answering every review with a canned answer.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use initializer_load::baseline;

/// Serve the baseline webhook.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// Directory holding tls.crt and tls.key.
    #[arg(long)]
    tls_dir: PathBuf,
    /// Serve the no-work floor: answer every review with the bytes the baseline gave the
    /// first one.
    #[arg(long)]
    floor: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let acceptor = baseline::acceptor(&args.tls_dir)?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let app = if args.floor {
        baseline::floor_router()
    } else {
        baseline::router()
    };
    baseline::serve(listener, acceptor, app).await?;
    Ok(())
}
