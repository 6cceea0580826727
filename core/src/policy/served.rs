//! Whether an API server can run a compiled preset, from what its discovery says of
//! `admissionregistration.k8s.io`: the groundwork of the engine choice, which keeps the webhook,
//! with the reason in the status, where the API is missing (the sandbox, Kubernetes 1.33 and
//! older, 1.34–1.35 without the beta turned on).
//!
//! The spec of MutatingAdmissionPolicy is the same in v1 (GA, on by default from Kubernetes
//! 1.36) and v1beta1 (1.34–1.35, off unless the `MutatingAdmissionPolicy` feature gate is on and
//! `--runtime-config=admissionregistration.k8s.io/v1beta1=true` serves it). v1alpha1 (1.32–1.33)
//! is not used: the compiled CEL needs `transformList` (two-variable comprehensions), which an
//! API server admits in a new expression only from 1.33, and an alpha API is no place to move
//! every create of a cluster to.

/// The API group of admission policies.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// The versions a compiled preset can be written at, the preferred first.
pub const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

const POLICIES: &str = "mutatingadmissionpolicies";
const BINDINGS: &str = "mutatingadmissionpolicybindings";

/// What discovery lists for one version of [`GROUP`]: the version and its resources' plural
/// names (`GET /apis/admissionregistration.k8s.io/<version>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// The version (`v1`, `v1beta1`, ...).
    pub version: String,
    /// The resources it serves.
    pub resources: Vec<String>,
}

/// Why the API server cannot run a compiled preset: the reason the status gives for keeping
/// the webhook.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotServed {
    /// The API server serves both kinds at no version the compiler writes.
    #[error(
        "the API server serves no MutatingAdmissionPolicy and binding at v1 or v1beta1 (served \
         versions of {GROUP}: {served}): v1 is on by default from Kubernetes 1.36; on 1.34 and \
         1.35, v1beta1 needs --feature-gates=MutatingAdmissionPolicy=true and \
         --runtime-config={GROUP}/v1beta1=true on the API server"
    )]
    Missing {
        /// The versions of the group it does serve, comma-separated (`none` without the group).
        served: String,
    },
}

/// The version to write policies and bindings at: the first of [`VERSIONS`] that serves both.
pub fn served_version(discovered: &[Discovered]) -> Result<&'static str, NotServed> {
    let serves_both = |version: &str| {
        discovered.iter().any(|d| {
            d.version == version
                && d.resources.iter().any(|r| r == POLICIES)
                && d.resources.iter().any(|r| r == BINDINGS)
        })
    };
    match VERSIONS.into_iter().find(|v| serves_both(v)) {
        Some(version) => Ok(version),
        None => {
            let versions: Vec<&str> = discovered.iter().map(|d| d.version.as_str()).collect();
            Err(NotServed::Missing {
                served: if versions.is_empty() {
                    "none".to_owned()
                } else {
                    versions.join(", ")
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(version: &str, resources: &[&str]) -> Discovered {
        Discovered {
            version: version.to_owned(),
            resources: resources.iter().map(|r| r.to_string()).collect(),
        }
    }

    const V1_WEBHOOKS_AND_VALIDATING: &[&str] = &[
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ];

    #[test]
    fn kubernetes_1_35_with_the_beta_on_serves_v1beta1() {
        let discovered = [
            version("v1", V1_WEBHOOKS_AND_VALIDATING),
            version(
                "v1beta1",
                &[
                    "mutatingadmissionpolicies",
                    "mutatingadmissionpolicybindings",
                    "validatingadmissionpolicies",
                ],
            ),
        ];
        assert_eq!(served_version(&discovered), Ok("v1beta1"));
    }

    #[test]
    fn v1_is_preferred_where_both_are_served() {
        let both = [
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
        ];
        let discovered = [version("v1beta1", &both), version("v1", &both)];
        assert_eq!(served_version(&discovered), Ok("v1"));
    }

    #[test]
    fn without_the_api_the_reason_says_how_to_get_it() {
        let default_1_35 = [version("v1", V1_WEBHOOKS_AND_VALIDATING)];
        let err = served_version(&default_1_35).unwrap_err();
        assert_eq!(
            err,
            NotServed::Missing {
                served: "v1".into()
            }
        );
        let message = err.to_string();
        assert!(message.contains("--feature-gates=MutatingAdmissionPolicy=true"));
        assert!(message.contains("--runtime-config=admissionregistration.k8s.io/v1beta1=true"));
        // Policies without bindings (or the alpha) are not enough.
        let half = [
            version("v1beta1", &["mutatingadmissionpolicies"]),
            version(
                "v1alpha1",
                &[
                    "mutatingadmissionpolicies",
                    "mutatingadmissionpolicybindings",
                ],
            ),
        ];
        assert!(served_version(&half).is_err());
        assert_eq!(
            served_version(&[]),
            Err(NotServed::Missing {
                served: "none".into()
            })
        );
    }
}
