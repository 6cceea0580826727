//! The sandbox authenticates like a real API server: a request must carry the bearer token its
//! kubeconfig holds (a fresh one per sandbox), or it is answered 401; only the health and
//! version endpoints are anonymous (kube-apiserver's `system:public-info-viewer`).

#![allow(clippy::unwrap_used)]

mod api_support;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client for the sandbox whose kubeconfig user carries `token` (none when `None`).
async fn client_with_token(kubeconfig: &std::path::Path, token: Option<&str>) -> kube::Client {
    let mut yaml: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let user = yaml["users"][0]["user"].as_object_mut().unwrap();
    match token {
        Some(t) => user.insert("token".into(), t.into()),
        None => user.remove("token"),
    };
    let parsed = Kubeconfig::from_yaml(&serde_saphyr::to_string(&yaml).unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_request_without_the_kubeconfigs_token_is_unauthorized() {
    let sb = api_support::start().await;
    let path = sb.handle.kubeconfig_path().to_path_buf();
    for token in [None, Some("sandbox"), Some("a-guess")] {
        let client = client_with_token(&path, token).await;
        let err = Api::<Namespace>::all(client)
            .list(&Default::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 401 && s.reason == "Unauthorized"),
            "token {token:?}: {err:?}"
        );
    }
    // The kubeconfig's own client still works.
    Api::<Namespace>::all(sb.client())
        .list(&Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn health_and_version_stay_anonymous_and_control_does_not() {
    let sb = api_support::start().await;
    let anonymous = client_with_token(sb.handle.kubeconfig_path(), None).await;
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        anonymous.request_text(request).await.unwrap();
    }
    let request = http::Request::get("/sandbox/v1/faults")
        .body(Vec::new())
        .unwrap();
    let err = anonymous.request_text(request).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "{err:?}"
    );
}

#[tokio::test]
async fn every_sandbox_gets_its_own_token() {
    let a = api_support::start().await;
    let b = api_support::start().await;
    let token = |sb: &api_support::TestSandbox| {
        let text = std::fs::read_to_string(sb.handle.kubeconfig_path()).unwrap();
        let yaml: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        yaml["users"][0]["user"]["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (ta, tb) = (token(&a), token(&b));
    assert_ne!(ta, tb);
    assert!(ta.len() >= 32, "{ta}");
}
