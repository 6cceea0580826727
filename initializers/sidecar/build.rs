//! Hot functions first in release images: see `initializer-link-order`.

fn main() {
    initializer_link_order::apply("initializers/sidecar");
}
