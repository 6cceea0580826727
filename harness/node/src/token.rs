//! Service-account tokens for projected volumes, as the kubelet gets them: one TokenRequest per
//! pod, service account, audience and lifetime, bound to the pod (the API server refuses the
//! token once the pod is gone), refreshed after 80 % of its lifetime.
//!
//! Only against an API server that serves TokenRequest; on the sandbox the node writes a
//! placeholder instead (`NodeConfig::service_account_tokens`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;

/// The lifetime asked for when the projection names none (the API's default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// One token a pod needs.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct TokenKey {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's uid (the token is bound to it).
    pub pod_uid: String,
    /// The pod's service account.
    pub service_account: String,
    /// The audience, if the projection names one.
    pub audience: Option<String>,
    /// The lifetime asked for.
    pub expiration_seconds: i64,
}

impl TokenKey {
    /// The key of `source` in `pod`.
    pub fn of(pod: &Pod, source: &ServiceAccountTokenProjection) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            service_account: pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
            audience: source.audience.clone().filter(|a| !a.is_empty()),
            expiration_seconds: source
                .expiration_seconds
                .unwrap_or(DEFAULT_EXPIRATION_SECONDS),
        }
    }

    /// The TokenRequest for this key.
    pub fn request(&self) -> TokenRequest {
        TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: self.audience.clone().map(|audience| vec![audience]),
                expiration_seconds: Some(self.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(self.pod.clone()),
                    uid: Some(self.pod_uid.clone()),
                }),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        }
    }
}

/// Every token a pod's projected volumes need.
pub fn keys(pod: &Pod) -> Vec<TokenKey> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| TokenKey::of(pod, t))
        .collect()
}

/// When a token issued for `expiration_seconds` is refreshed: after 80 % of its life.
pub fn refresh_after(expiration_seconds: i64) -> Duration {
    let seconds = u64::try_from(expiration_seconds.max(1)).unwrap_or(1);
    Duration::from_millis(seconds * 800)
}

struct Issued {
    token: String,
    refresh_at: Instant,
}

/// The tokens issued to this node's pods.
pub struct Tokens {
    client: Client,
    issued: Mutex<HashMap<TokenKey, Issued>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    /// No token yet.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            issued: Mutex::new(HashMap::new()),
        }
    }

    /// The current token for `key`, if one was issued.
    pub fn get(&self, key: &TokenKey) -> Option<String> {
        let issued = self.issued.lock().ok()?;
        issued.get(key).map(|i| i.token.clone())
    }

    /// When the next of `pod`'s tokens is due for a refresh.
    pub fn next_refresh(&self, pod: &Pod) -> Option<Instant> {
        let issued = self.issued.lock().ok()?;
        keys(pod)
            .iter()
            .filter_map(|k| issued.get(k).map(|i| i.refresh_at))
            .min()
    }

    /// Requests every token `pod` needs that is missing or due; `Ok(true)` when one changed.
    pub async fn ensure(&self, pod: &Pod) -> Result<bool, String> {
        let mut changed = false;
        for key in keys(pod) {
            let due = self
                .issued
                .lock()
                .ok()
                .and_then(|issued| issued.get(&key).map(|i| i.refresh_at))
                .is_none_or(|at| at <= Instant::now());
            if !due {
                continue;
            }
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &key.namespace);
            let answer: TokenRequest = api
                .create_subresource(
                    "token",
                    &key.service_account,
                    &PostParams::default(),
                    &key.request(),
                )
                .await
                .map_err(|e| {
                    format!(
                        "failed to request a token for service account {}/{}: {e}",
                        key.namespace, key.service_account
                    )
                })?;
            let token = answer.status.and_then(|s| s.token).unwrap_or_default();
            let refresh_at = Instant::now() + refresh_after(key.expiration_seconds);
            if let Ok(mut issued) = self.issued.lock() {
                issued.insert(key, Issued { token, refresh_at });
            }
            changed = true;
        }
        Ok(changed)
    }

    /// Forgets a pod's tokens once it is gone.
    pub fn forget(&self, namespace: &str, pod: &str) {
        if let Ok(mut issued) = self.issued.lock() {
            issued.retain(|k, _| !(k.namespace == namespace && k.pod == pod));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ProjectedVolumeSource, Volume, VolumeProjection};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod_with(audience: Option<&str>, expiration: Option<i64>, sa: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("op-1".into()),
                namespace: Some("initializer-system".into()),
                uid: Some("u-1".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                service_account_name: sa.map(Into::into),
                volumes: Some(vec![Volume {
                    name: "kube-api-access-abcde".into(),
                    projected: Some(ProjectedVolumeSource {
                        sources: Some(vec![VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                audience: audience.map(Into::into),
                                expiration_seconds: expiration,
                                path: "token".into(),
                                ..ServiceAccountTokenProjection::default()
                            }),
                            ..VolumeProjection::default()
                        }]),
                        ..ProjectedVolumeSource::default()
                    }),
                    ..Volume::default()
                }]),
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_token_is_bound_to_its_pod_for_its_service_account() {
        let pod = pod_with(None, Some(3607), Some("initializer-operator"));
        let keys = keys(&pod);
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].service_account, "initializer-operator");
        let request = keys[0].request();
        let spec = request.spec.unwrap();
        let bound = spec.bound_object_ref.unwrap();
        assert_eq!(bound.kind.as_deref(), Some("Pod"));
        assert_eq!(bound.uid.as_deref(), Some("u-1"));
        assert_eq!(spec.expiration_seconds, Some(3607));
        assert_eq!(spec.audiences, None);
    }

    #[test]
    fn the_default_service_account_and_lifetime_apply_when_unset() {
        let key = &keys(&pod_with(Some("vault"), None, None))[0];
        assert_eq!(key.service_account, "default");
        assert_eq!(key.expiration_seconds, DEFAULT_EXPIRATION_SECONDS);
        assert_eq!(
            key.request().spec.unwrap().audiences,
            Some(vec!["vault".to_string()])
        );
    }

    #[test]
    fn tokens_are_refreshed_after_four_fifths_of_their_life() {
        assert_eq!(refresh_after(3600), Duration::from_secs(2880));
        assert_eq!(refresh_after(0), Duration::from_millis(800));
    }
}
