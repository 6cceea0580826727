//! Names of every object derived from one Initializer: its Deployment, Service, Secrets,
//! ConfigMap, webhook configuration and fallback, shortened with a stable hash when the
//! Initializer's name is not a DNS-1035 label or is too long.

use initializer_crds::constants::GROUP;

/// Longest base name derived from an Initializer's name; the longest suffix (`-config`) keeps
/// every derived name within a DNS-1035 label (63), and Deployment pod names stay readable.
pub const MAX_BASE_NAME: usize = 50;

/// Names of everything derived from one Initializer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The Initializer's own name.
    pub initializer: String,
    /// Deployment, Service and PodDisruptionBudget name (a DNS-1035 label).
    pub base: String,
    /// Value of the `initializer.dev/initializer` label (at most 63 characters).
    pub label: String,
    /// The serving certificate Secret (`kubernetes.io/tls`).
    pub tls_secret: String,
    /// The CA Secret (never mounted).
    pub ca_secret: String,
    /// The ConfigMap holding `config.yaml`.
    pub config_map: String,
    /// The MutatingWebhookConfiguration.
    pub configuration: String,
    /// The webhook's name inside the configuration (three or more DNS segments).
    pub webhook: String,
    /// The fallback ValidatingAdmissionPolicy and its binding.
    pub fallback: String,
    /// With the `InitializerConfiguration` backend, the ClusterRole and ClusterRoleBinding that
    /// let the initializer's ServiceAccount watch and update what it initializes.
    pub cluster_role: String,
}

/// Derives every object name from an Initializer's name. Names that are not DNS-1035 labels or
/// are too long are shortened with a stable hash of the full name, so they never collide.
pub fn names(initializer: &str) -> Names {
    let is_label = initializer.len() <= MAX_BASE_NAME
        && initializer.starts_with(|c: char| c.is_ascii_lowercase())
        && initializer
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !initializer.ends_with('-');
    let base = if is_label {
        initializer.to_string()
    } else {
        let mut sanitized: String = initializer
            .chars()
            .map(|c| {
                if c.is_ascii_lowercase() || c.is_ascii_digit() {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if !sanitized.starts_with(|c: char| c.is_ascii_lowercase()) {
            sanitized.insert_str(0, "i-");
        }
        let prefix: String = sanitized.chars().take(MAX_BASE_NAME - 9).collect();
        format!(
            "{}-{:08x}",
            prefix.trim_end_matches('-'),
            fnv1a(initializer) as u32
        )
    };
    let label = if initializer.len() <= 63 {
        initializer.to_string()
    } else {
        base.clone()
    };
    Names {
        initializer: initializer.to_string(),
        tls_secret: format!("{base}{TLS_SECRET_SUFFIX}"),
        ca_secret: format!("{base}{CA_SECRET_SUFFIX}"),
        config_map: format!("{base}{CONFIG_MAP_SUFFIX}"),
        configuration: format!("{CONFIGURATION_PREFIX}{base}"),
        fallback: format!("initializer-{base}-fallback"),
        cluster_role: format!("initializer-{base}-controller"),
        webhook: webhook_name(&base),
        label,
        base,
    }
}

/// How the serving certificate Secret's name ends.
pub const TLS_SECRET_SUFFIX: &str = "-tls";
/// How the CA Secret's name ends.
pub const CA_SECRET_SUFFIX: &str = "-ca";
/// How the generated ConfigMap's name ends.
pub const CONFIG_MAP_SUFFIX: &str = "-config";

/// Whether a Secret of this name could be one the operator writes for some Initializer, now or
/// once one is created: every name with a key-material suffix is reserved, not only today's.
pub fn is_reserved_secret_name(name: &str) -> bool {
    [TLS_SECRET_SUFFIX, CA_SECRET_SUFFIX]
        .iter()
        .any(|suffix| name.ends_with(suffix))
}

/// Whether a ConfigMap of this name could be one the operator writes for some Initializer.
pub fn is_reserved_config_map_name(name: &str) -> bool {
    name.ends_with(CONFIG_MAP_SUFFIX)
}

/// What every configuration's name starts with, before the base name.
const CONFIGURATION_PREFIX: &str = "initializer-";

fn webhook_name(base: &str) -> String {
    format!("{base}.initializers.{GROUP}")
}

/// The webhook (and, with the legacy backend, pending) name the operator gives inside the
/// configuration named `configuration` (`initializer-<base>` holds `<base>.initializers.
/// initializer.dev`); `None` for a name it never gives a configuration.
pub fn webhook_of_configuration(configuration: &str) -> Option<String> {
    configuration
        .strip_prefix(CONFIGURATION_PREFIX)
        .map(webhook_name)
}

/// 64-bit FNV-1a: small, stable across Rust releases (unlike `DefaultHasher`).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_derived_secret_and_config_map_name_is_reserved() {
        for initializer in ["sidecar", "a.b.c", &"x".repeat(200), "Upper-Case"] {
            let n = names(initializer);
            assert!(is_reserved_secret_name(&n.tls_secret), "{n:?}");
            assert!(is_reserved_secret_name(&n.ca_secret), "{n:?}");
            assert!(is_reserved_config_map_name(&n.config_map), "{n:?}");
        }
        assert!(!is_reserved_secret_name("vendor-token"));
        assert!(!is_reserved_config_map_name("settings"));
    }

    #[test]
    fn long_or_dotted_names_are_shortened_with_a_stable_hash() {
        let long = "a".repeat(200);
        let n = names(&long);
        assert!(n.base.len() <= MAX_BASE_NAME);
        assert!(n.config_map.len() <= 63);
        assert!(n.label.len() <= 63);
        assert_eq!(n, names(&long));
        assert_ne!(names(&"a".repeat(201)).base, n.base);
        let dotted = names("sidecar.example.com");
        assert!(dotted.base.starts_with("sidecar-example-com-"));
        assert_eq!(dotted.label, "sidecar.example.com");
        let digit = names("1st");
        assert!(digit.base.starts_with("i-1st-"));
        assert_eq!(names("sidecar").base, "sidecar");
    }
}
