//! `proxy-initializer`: inject a proxy sidecar (see the crate docs and README).

fn main() -> Result<(), kube_initializer::Error> {
    proxy_initializer::initializer().main()
}
