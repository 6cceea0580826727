//! `initializer-baseline`: the hand-written admission webhook the benchmark measures the SDK
//! against (see [`initializer_load::baseline`]). `POST /mutate`, `GET /readyz`, HTTPS.

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let acceptor = baseline::acceptor(&args.tls_dir)?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    baseline::serve(listener, acceptor).await?;
    Ok(())
}
