//! `sidecar-initializer`: serve the sidecar initializer (see the crate docs and README).

fn main() -> Result<(), kube_initializer::Error> {
    sidecar_initializer::initializer().main()
}
