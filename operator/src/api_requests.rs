//! Counts the operator's own requests to the API server by verb, named as the API server names
//! them (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`):
//! exported as `initializer_operator_api_requests_total{verb}`, so an operator that polls, or
//! whose requests grow with time or with the number of Initializers, shows it (the scale
//! benchmark reports it per second).
//!
//! [`verb`] is pure: the path rules of the API server's request info (`k8s.io/apiserver`
//! `pkg/endpoints/request/requestinfo.go`), reduced to what tells the verbs apart. The layer
//! around the client only asks it and counts.

use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The label of one count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// What [`verb`] says the request was.
    pub verb: String,
}

/// The verb the API server authorizes a request under. Requests outside `/api` and `/apis`
/// (`/version`, `/openapi`) and discovery of groups and versions count as `get`.
pub fn verb(method: &http::Method, path: &str, query: Option<&str>) -> &'static str {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // /api/{version}/... and /apis/{group}/{version}/...
    let resource_parts = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => None,
    };
    let Some(mut rest) = resource_parts.filter(|rest| !rest.is_empty()) else {
        return if method == http::Method::GET {
            "get"
        } else {
            "other"
        };
    };
    // namespaces/{namespace}/{resource}/...: a namespaced resource; namespaces and
    // namespaces/{name} alone are the Namespace kind itself.
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    let collection = rest.len() == 1;
    let watching = query.is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if collection => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if collection => "deletecollection",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// A client layer counting each request under its [`verb`].
#[derive(Clone, Debug)]
pub struct CountRequests {
    counts: Family<VerbLabels, Counter>,
}

impl CountRequests {
    /// Counts into `counts` (the operator's `api_requests` family).
    pub fn new(counts: Family<VerbLabels, Counter>) -> Self {
        Self { counts }
    }
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counts: self.counts.clone(),
        }
    }
}

/// The client's service, counting.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    counts: Family<VerbLabels, Counter>,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = verb(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        self.counts
            .get_or_create(&VerbLabels { verb: verb.into() })
            .inc();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn paths_and_methods_name_the_verbs_the_api_server_authorizes() {
        let cases = [
            (Method::GET, "/api/v1/namespaces/ns/pods", None, "list"),
            (Method::GET, "/api/v1/namespaces/ns/pods/p", None, "get"),
            (
                Method::GET,
                "/api/v1/pods",
                Some("watch=true&resourceVersion=5"),
                "watch",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods",
                Some("labelSelector=a%3Db&watch=1"),
                "watch",
            ),
            (Method::GET, "/api/v1/namespaces", None, "list"),
            (Method::GET, "/api/v1/namespaces/ns", None, "get"),
            (Method::DELETE, "/api/v1/namespaces/ns", None, "delete"),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/ns/deployments/d/status",
                None,
                "get",
            ),
            (
                Method::PATCH,
                "/apis/initializer.dev/v1alpha1/initializers/i/status",
                Some("fieldManager=x"),
                "patch",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                None,
                "update",
            ),
            (
                Method::POST,
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                None,
                "create",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/ns/replicasets",
                None,
                "deletecollection",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/ns/replicasets/r",
                None,
                "delete",
            ),
            (Method::GET, "/version", None, "get"),
            (Method::GET, "/apis/apps/v1", None, "get"),
            (Method::GET, "/api/v1/pods", Some("watchers=true"), "list"),
        ];
        for (method, path, query, expected) in cases {
            assert_eq!(
                verb(&method, path, query),
                expected,
                "{method} {path}?{query:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_layer_counts_each_request_once_under_its_verb() {
        use tower::{Layer, ServiceExt};
        let counts = Family::<VerbLabels, Counter>::default();
        let service = CountRequests::new(counts.clone()).layer(tower::service_fn(
            |_: http::Request<()>| async { Ok::<_, std::convert::Infallible>(()) },
        ));
        for uri in ["/api/v1/pods", "/api/v1/pods?watch=true", "/api/v1/pods"] {
            let request = http::Request::get(uri).body(()).unwrap();
            service.clone().oneshot(request).await.unwrap();
        }
        let count = |verb: &str| {
            counts
                .get_or_create(&VerbLabels { verb: verb.into() })
                .get()
        };
        assert_eq!((count("list"), count("watch"), count("get")), (2, 1, 0));
    }
}
