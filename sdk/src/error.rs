//! The one error type of the SDK: every fallible step outside a handler reports through it.

use std::path::PathBuf;

/// What went wrong while loading, serving or testing an initializer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file (certificate, key, configuration) failed.
    #[error("failed to read {path}: {source}")]
    ReadFile {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying IO error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate or key could not be parsed or do not belong together.
    #[error("failed to load the TLS certificate and key from {dir}: {message}")]
    LoadTls {
        /// The directory holding `tls.crt` and `tls.key`.
        dir: PathBuf,
        /// Why the pair was refused.
        message: String,
    },
    /// The configuration file is not valid for the initializer's configuration type.
    #[error("failed to parse the configuration {path}: {message}")]
    ParseConfig {
        /// The configuration file.
        path: PathBuf,
        /// The parser's explanation.
        message: String,
    },
    /// The TLS server configuration could not be built.
    #[error("failed to build the TLS server configuration: {0}")]
    BuildTls(#[source] rustls::Error),
    /// Binding the listen address failed.
    #[error("failed to bind {addr}: {source}")]
    Bind {
        /// The address that was in use or not allowed.
        addr: std::net::SocketAddr,
        /// The underlying IO error.
        #[source]
        source: std::io::Error,
    },
    /// Building the async runtime failed.
    #[error("failed to build the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Installing the termination signal handlers failed.
    #[error("failed to install the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
    /// Serializing or deserializing JSON failed (in the testing helpers).
    #[error("failed to encode or decode JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A review sent by the testing helpers could not be sent or its answer not read.
    #[error("failed to send the request to {url}: {message}")]
    Request {
        /// Where the request went.
        url: String,
        /// What failed.
        message: String,
    },
    /// A request to the API server failed (controller mode).
    #[error("failed to talk to the API server: {0}")]
    Kube(#[source] kube::Error),
    /// A request to the API server did not answer in time (controller mode).
    #[error("the API server did not answer within {0:?}")]
    ApiTimeout(std::time::Duration),
    /// The controller mode's flags are missing or contradict each other.
    #[error("invalid controller-mode arguments: {0}")]
    ControllerArgs(String),
}
