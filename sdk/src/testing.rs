//! Test an initializer without a socket: build a review for an object, send it through the
//! same router the server uses, and assert on the response, the patch and the patched object.
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use kube_initializer::{Denial, Initializer, Review, testing};
//!
//! let init = Initializer::new("no-host-network").handle(|pod: &mut Pod, _: &Review| {
//!     match pod.spec.as_ref().and_then(|s| s.host_network) {
//!         Some(true) => Err(Denial::new("hostNetwork is not allowed")),
//!         _ => Ok(()),
//!     }
//! });
//! let tester = testing::Tester::new(init);
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "p"},
//!     "spec": {"hostNetwork": true, "containers": [{"name": "c"}]}
//! })).unwrap();
//! let answer = tester.call_blocking(&testing::review(&pod)).unwrap();
//! assert!(!answer.allowed());
//! assert_eq!(answer.message(), Some("hostNetwork is not allowed"));
//! ```

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use base64::Engine as _;
use http_body_util::BodyExt;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::error::Error;
use crate::initializer::Initializer;
use crate::serve::server::{INITIALIZE_PATH, router};
use crate::tls::CertStore;

/// A review under construction.
#[derive(Clone, Debug)]
pub struct ReviewBuilder {
    uid: String,
    group: String,
    version: String,
    kind: String,
    plural: String,
    operation: &'static str,
    namespace: Option<String>,
    name: String,
    user: String,
    groups: Vec<String>,
    dry_run: bool,
    object: Value,
    old_object: Option<Value>,
}

/// A CREATE review for `obj`, in the object's namespace (or `default`), by user `alice`.
pub fn review<K: Resource<DynamicType = ()> + Serialize>(obj: &K) -> ReviewBuilder {
    let mut object = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut object {
        map.insert(
            "apiVersion".into(),
            Value::String(K::api_version(&()).into_owned()),
        );
        map.insert("kind".into(), Value::String(K::kind(&()).into_owned()));
    }
    ReviewBuilder {
        uid: "00000000-0000-0000-0000-000000000001".into(),
        group: K::group(&()).into_owned(),
        version: K::version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        plural: K::plural(&()).into_owned(),
        operation: "CREATE",
        namespace: Some(
            obj.meta()
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
        ),
        name: obj.meta().name.clone().unwrap_or_default(),
        user: "alice".into(),
        groups: vec!["system:authenticated".into()],
        dry_run: false,
        object,
        old_object: None,
    }
}

impl ReviewBuilder {
    /// Make it an UPDATE from `old`.
    pub fn update<K: Serialize>(mut self, old: &K) -> Self {
        self.operation = "UPDATE";
        self.old_object = serde_json::to_value(old).ok();
        self
    }

    /// Make it a DELETE (the object becomes the old object).
    pub fn delete(mut self) -> Self {
        self.operation = "DELETE";
        self.old_object = Some(std::mem::take(&mut self.object));
        self
    }

    /// Set the namespace (`None` for cluster-scoped objects).
    pub fn namespace(mut self, namespace: Option<&str>) -> Self {
        self.namespace = namespace.map(str::to_owned);
        self
    }

    /// Send as this user (`userInfo.username`), as `review.user_info()` then reports.
    pub fn user(mut self, user: &str) -> Self {
        self.user = user.into();
        self
    }

    /// Mark the request as a dry run.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Use this request uid (the answer must echo it) instead of the generated one.
    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = uid.into();
        self
    }

    /// The object as it will be sent.
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// The review document.
    pub fn to_json(&self) -> Value {
        let mut request = json!({
            "uid": self.uid,
            "kind": {"group": self.group, "version": self.version, "kind": self.kind},
            "resource": {"group": self.group, "version": self.version, "resource": self.plural},
            "requestKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "name": self.name,
            "operation": self.operation,
            "userInfo": {"username": self.user, "groups": self.groups},
            "dryRun": self.dry_run,
        });
        if let Some(ns) = &self.namespace {
            request["namespace"] = Value::String(ns.clone());
        }
        if !self.object.is_null() {
            request["object"] = self.object.clone();
        }
        if let Some(old) = &self.old_object {
            request["oldObject"] = old.clone();
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }

    /// The review document as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_json()).unwrap_or_default()
    }
}

/// An answered review, with what it was asked about.
#[derive(Clone, Debug)]
pub struct Answer {
    response: Value,
    object: Value,
    patch: Option<json_patch::Patch>,
}

impl Answer {
    /// The `response` part of the returned review.
    pub fn response(&self) -> &Value {
        &self.response
    }

    /// The uid the response carries.
    pub fn uid(&self) -> &str {
        self.response["uid"].as_str().unwrap_or_default()
    }

    /// Whether the object was admitted.
    pub fn allowed(&self) -> bool {
        self.response["allowed"].as_bool().unwrap_or(false)
    }

    /// The status code of a refusal or failure.
    pub fn code(&self) -> Option<u16> {
        self.response["status"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
    }

    /// The message of a refusal or failure.
    pub fn message(&self) -> Option<&str> {
        self.response["status"]["message"].as_str()
    }

    /// The warnings kubectl would print (from `review.warn` and from the failure policy).
    pub fn warnings(&self) -> Vec<String> {
        self.response["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The decoded JSON patch, `None` when the object is unchanged.
    pub fn patch(&self) -> Option<&json_patch::Patch> {
        self.patch.as_ref()
    }

    /// The object with the patch applied, untyped.
    pub fn patched_json(&self) -> Result<Value, Error> {
        let mut object = self.object.clone();
        if let Some(patch) = &self.patch {
            json_patch::patch(&mut object, patch).map_err(|e| Error::Request {
                url: "patch".into(),
                message: format!("failed to apply the patch: {e}"),
            })?;
        }
        Ok(object)
    }

    /// The object with the patch applied, typed.
    pub fn patched<K: DeserializeOwned>(&self) -> Result<K, Error> {
        Ok(serde_json::from_value(self.patched_json()?)?)
    }
}

/// An HTTP-level answer: status and body.
#[derive(Clone, Debug)]
pub struct HttpAnswer {
    /// The HTTP status code (200 for every well-formed review, refused or not).
    pub status: u16,
    /// The response body, decoded as UTF-8 (lossy).
    pub body: String,
}

/// An initializer wired to its router, callable without a socket.
#[derive(Clone, Debug)]
pub struct Tester {
    router: Router,
}

impl Tester {
    /// Wire `initializer` to the server's router (no certificate loaded).
    pub fn new<C: DeserializeOwned + Send + Sync + 'static>(initializer: Initializer<C>) -> Self {
        let tls = Arc::new(CertStore::new("/nonexistent"));
        Self {
            router: router(initializer, tls),
        }
    }

    /// Send raw bytes with `method` to `path`.
    pub async fn send(&self, method: &str, path: &str, body: Vec<u8>) -> Result<HttpAnswer, Error> {
        let fail = |m: String| Error::Request {
            url: path.to_owned(),
            message: m,
        };
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .map_err(|e| fail(e.to_string()))?;
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        Ok(HttpAnswer {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    /// Send a review and decode the answer; an HTTP error becomes an `Err`.
    pub async fn call(&self, review: &ReviewBuilder) -> Result<Answer, Error> {
        let http = self
            .send("POST", INITIALIZE_PATH, review.to_bytes())
            .await?;
        if http.status != 200 {
            return Err(Error::Request {
                url: INITIALIZE_PATH.into(),
                message: format!("failed with HTTP {}: {}", http.status, http.body),
            });
        }
        let document: Value = serde_json::from_str(&http.body)?;
        let response = document["response"].clone();
        let patch = match response["patch"].as_str() {
            Some(encoded) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|e| Error::Request {
                        url: INITIALIZE_PATH.into(),
                        message: format!("failed to decode the patch: {e}"),
                    })?;
                Some(serde_json::from_slice(&bytes)?)
            }
            None => None,
        };
        Ok(Answer {
            response,
            object: review.object.clone(),
            patch,
        })
    }

    /// [`Self::call`] from synchronous code (builds a small runtime; not inside a runtime).
    pub fn call_blocking(&self, review: &ReviewBuilder) -> Result<Answer, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Request {
                url: INITIALIZE_PATH.into(),
                message: format!("failed to build a runtime: {e}"),
            })?;
        runtime.block_on(self.call(review))
    }
}
