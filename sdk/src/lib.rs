//! Write Kubernetes initializers (mutating admission webhooks) as typed Rust functions.
//!
//! The same handlers also run as a Kubernetes 1.7–1.13 initializer controller
//! (`--mode controller`, see [`advanced::Mode`] and [`Initializer::bind_controller`]): instead of answering
//! the API server's reviews, the initializer watches objects with `includeUninitialized=true` and
//! acts on those whose `metadata.initializers.pending` starts with its `--pending-name`.
//!
//! An initializer is a set of handlers, one per kind, each changing an object in place or
//! refusing it. The SDK serves the admission protocol over HTTPS, computes the JSON patch from
//! what the handler changed, reloads the certificate and configuration when their files
//! change, answers for handlers that panic or run too long, and reports health and metrics.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Container;
//! use kube_initializer::mutate::{self, PodSpecHolder};
//! use kube_initializer::{Denial, Initialize, Initializer, Review};
//! use serde::Deserialize;
//!
//! /// `config.yaml`: the sidecars to inject.
//! #[derive(Deserialize)]
//! struct Config {
//!     containers: Vec<Container>,
//! }
//!
//! #[derive(Clone)]
//! struct Sidecar;
//!
//! // One generic implementation serves Pods, Deployments, StatefulSets, ...
//! impl<K: PodSpecHolder> Initialize<K, Config> for Sidecar {
//!     fn initialize(&self, obj: &mut K, review: &Review<Config>) -> Result<(), Denial> {
//!         if let Some(spec) = obj.pod_spec_mut() {
//!             for container in &review.config().containers {
//!                 mutate::add_container(spec, container); // idempotent
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> Result<(), kube_initializer::Error> {
//!     // Parses the standard flags (--listen, --tls-dir, --config-dir, --annotation, ...),
//!     // logs (RUST_LOG), serves HTTPS until SIGTERM, then drains; never waits on a
//!     // hung handler at exit.
//!     Initializer::<Config>::with_config("sidecar").handle_pod_kinds(Sidecar).main()
//! }
//! ```
//!
//! A binary with flags of its own flattens [`ServeArgs`] into them and calls [`run_main`].
//!
//! The crate root is what an initializer author writes against; the rest (serving by hand, the
//! controller mode's types, the raw answer types, and the [`Tuning`](advanced::Tuning) knobs) is
//! in [`advanced`]. A server of your own serves the routes from [`Initializer::into_router`].
//!
//! Testing the same initializer needs no socket and no cluster, see [`testing`]:
//!
//! ```
//! # use k8s_openapi::api::core::v1::{Container, Pod};
//! # use kube_initializer::mutate::{self, PodSpecHolder};
//! # use kube_initializer::{Denial, Initialize, Initializer, Review};
//! # #[derive(serde::Deserialize)] struct Config { containers: Vec<Container> }
//! # #[derive(Clone)] struct Sidecar;
//! # impl<K: PodSpecHolder> Initialize<K, Config> for Sidecar {
//! #     fn initialize(&self, obj: &mut K, review: &Review<Config>) -> Result<(), Denial> {
//! #         if let Some(spec) = obj.pod_spec_mut() {
//! #             for c in &review.config().containers { mutate::add_container(spec, c); }
//! #         }
//! #         Ok(())
//! #     }
//! # }
//! use kube_initializer::testing::{Tester, review};
//!
//! let config = Config { containers: vec![Container { name: "sidecar-nginx".into(), ..Default::default() }] };
//! let tester = Tester::new(Initializer::with_config("sidecar").fixed_config(config).handle_pod_kinds(Sidecar));
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "nginx"},
//!     "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1"}]}
//! })).unwrap();
//!
//! let answer = tester.call_blocking(&review(&pod)).unwrap();
//! assert!(answer.allowed());
//! let patched: Pod = answer.patched().unwrap();
//! assert_eq!(patched.spec.unwrap().containers[1].name, "sidecar-nginx");
//!
//! // Idempotent: the patched object needs no further patch.
//! let again = tester.call_blocking(&review(&answer.patched::<Pod>().unwrap())).unwrap();
//! assert!(again.patch().is_none());
//! ```
//!
//! Handlers that must await something implement [`InitializeAsync`] instead and register with
//! [`Initializer::handle_async`].
//!
//! What the server guarantees:
//! - every well-formed `AdmissionReview` gets a well-formed answer with the same uid, also for
//!   kinds without a handler (admitted unchanged) and for dry runs;
//! - a handler that panics, overruns its [budget](Initializer::budget) or gets an object it
//!   cannot decode is answered by the [`FailurePolicy`] (admit with a warning, or refuse with
//!   code 500), and the server keeps serving;
//! - malformed reviews get HTTP 400, bodies over the size limit (7 MiB: an UPDATE of two
//!   3 MiB objects) HTTP 413, bodies slower than the body timeout (10 s) HTTP 408;
//! - a client gets 10 s for the TLS handshake and for each request head, and an idle
//!   keep-alive connection is closed after 120 s; at most 256 connections are open at once,
//!   further clients wait in the listen backlog (all set by [`ServeArgs`]);
//! - `/readyz` answers 200 only once the certificate and the configuration are loaded;
//!   `/healthz` answers 200 while the process serves; `/metrics` is Prometheus text;
//! - SIGTERM fails `/readyz` and has every answer close its connection; after the shutdown
//!   delay (5 s) the listener closes and in-flight requests drain.
//! - in controller mode, each object pending on the initializer gets ONE update (the handler's
//!   change and the name's removal, or a failure `result` for a refusal), redone from a fresh read
//!   after a 409; `/readyz` also waits for every watch to list once.

#![warn(missing_docs)]

pub mod advanced;
mod config;
mod controller;
// How reviews are served: the server, connections, the patch and the answer (`serve/mod.rs`).
#[cfg(feature = "init-tracing")]
mod entry;
mod error;
pub mod gate;
mod handler;
mod initializer;
mod mark;
mod metrics;
pub mod mutate;
mod reload;
mod review;
pub mod route;
mod serve;
pub mod testing;
mod tls;

#[cfg(feature = "init-tracing")]
pub use entry::{init_tracing, run_main};
pub use error::Error;

/// Result with the SDK's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
pub use gate::AnnotationGate;
pub use handler::{Initialize, InitializeAsync};
pub use initializer::{FailurePolicy, Initializer};
pub use review::{Denial, Operation, RequestInfo, Review};
pub use serve::server::ServeArgs;
