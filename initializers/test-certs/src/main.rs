//! `test-certs-initializer`: mount test certificates in test namespaces (see the crate docs).

use std::sync::Arc;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_initializer::ServeArgs;
use test_certs_initializer::TestCerts;

/// Mount a volume with test certificates into every pod in test namespaces.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Watch Namespaces (needs list/watch on namespaces) to match them by label too.
    #[arg(long, env = "TEST_CERTS_WATCH_NAMESPACES")]
    watch_namespaces: bool,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> anyhow::Result<()> {
    kube_initializer::run_main(serve(Args::parse()))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let handler = if args.watch_namespaces {
        let client = kube::Client::try_default().await?;
        let (store, writer) = reflector::store::<Namespace>();
        let stream = reflector(
            writer,
            watcher(
                kube::Api::<Namespace>::all(client),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .applied_objects();
        tokio::spawn(stream.for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
            }
        }));
        TestCerts::with_labels(Arc::new(store))
    } else {
        TestCerts::by_name()
    };
    test_certs_initializer::initializer(handler)
        .run(args.serve)
        .await?;
    Ok(())
}
