//! Image names shared by the bundle, the kind recipe and the sandbox's image map.

/// Registry and organisation every image lives under.
pub const REGISTRY: &str = "ghcr.io/initializer-dev";
/// Tag of every image: the workspace version.
pub const TAG: &str = env!("CARGO_PKG_VERSION");

/// Binary (and image repository) name of the operator.
pub const OPERATOR: &str = "initializer-operator";
/// Binary (and image repository) name of the built-in preset initializer.
pub const PRESET_INITIALIZER: &str = "preset-initializer";
/// Binaries of the example initializers.
pub const EXAMPLE_INITIALIZERS: [&str; 4] = [
    "sidecar-initializer",
    "test-certs-initializer",
    "proxy-initializer",
    "secret-guard-initializer",
];

/// Full image reference of one of our binaries: `ghcr.io/initializer-dev/<binary>:<version>`.
pub fn image(binary: &str) -> String {
    format!("{REGISTRY}/{binary}:{TAG}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_follow_registry_binary_tag() {
        assert_eq!(
            image(OPERATOR),
            format!(
                "ghcr.io/initializer-dev/initializer-operator:{}",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}
