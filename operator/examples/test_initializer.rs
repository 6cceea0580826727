//! A real SDK-built initializer (the secret guard) for the operator's reconcile tests: the
//! sandbox maps the test image to this executable and runs it as the Initializer's pods.
//!
//! Two switches in the environment make it misbehave the ways a test needs:
//! `TEST_INITIALIZER_MODE=panic` answers every review with a handler that panics (under the
//! guard's fail-closed policy the SDK denies with code 500), and `TEST_INITIALIZER_CERT_PEM`
//! with `TEST_INITIALIZER_KEY_PEM` serve that certificate instead of the mounted one.

use clap::Parser;
use k8s_openapi::api::core::v1::Secret;
use kube_initializer::{Denial, FailurePolicy, Initialize, Initializer, Review, ServeArgs};
use secret_guard_initializer::SecretGuard;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A handler that always panics.
#[derive(Clone, Debug)]
struct Panicking;

impl Initialize<Secret> for Panicking {
    #[allow(clippy::panic)] // Panicking is this handler's whole purpose.
    fn initialize(&self, _: &mut Secret, _: &Review) -> Result<(), Denial> {
        panic!("the test initializer panics, as asked (TEST_INITIALIZER_MODE=panic)")
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    // Kept until the process ends: the served certificate lives in it.
    let mut _tls_dir = None;
    if let (Ok(cert), Ok(key)) = (
        std::env::var("TEST_INITIALIZER_CERT_PEM"),
        std::env::var("TEST_INITIALIZER_KEY_PEM"),
    ) {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("tls.crt"), cert)?;
        std::fs::write(dir.path().join("tls.key"), key)?;
        args.serve.tls_dir = dir.path().to_path_buf();
        _tls_dir = Some(dir);
    }
    let initializer = if std::env::var("TEST_INITIALIZER_MODE").as_deref() == Ok("panic") {
        Initializer::new(secret_guard_initializer::NAME)
            .failure_policy(FailurePolicy::Deny)
            .handle::<Secret>(Panicking)
    } else {
        secret_guard_initializer::initializer(SecretGuard {
            min_length: 20,
            types: vec!["Opaque".into()],
        })
    };
    initializer.run(args.serve).await?;
    Ok(())
}
