//! The packaging crate's one error type: a variant per step of generating, validating, writing
//! or installing what ships.

/// Everything that can go wrong while generating, validating or installing the bundle and chart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object from the API server failed.
    #[error("failed to read {kind} {name}: {source}")]
    Get {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Server-side apply of an object failed.
    #[error("failed to apply {kind} {name}: {source}")]
    Apply {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Listing objects failed.
    #[error("failed to list {kind}: {source}")]
    List {
        /// Kind of the objects.
        kind: &'static str,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Deleting an object failed.
    #[error("failed to delete {kind} {name}: {source}")]
    Delete {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// An object did not reach the awaited state in time.
    #[error("failed to wait for {what}: {reason}")]
    Wait {
        /// What was awaited.
        what: String,
        /// Why waiting stopped.
        reason: String,
    },

    /// Reading a bundle directory failed.
    #[error("failed to read the bundle at {path}: {source}")]
    BundleRead {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },

    /// Writing a bundle file failed.
    #[error("failed to write the bundle at {path}: {source}")]
    BundleWrite {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },

    /// Generating the bundle failed.
    #[error("failed to generate the bundle: {0}")]
    BundleGenerate(String),

    /// The bundle breaks registry+v1 rules.
    #[error("failed to validate the bundle: {0}")]
    BundleInvalid(String),

    /// Generating the Helm chart from the bundle failed.
    #[error("failed to generate the Helm chart: {0}")]
    ChartGenerate(String),

    /// Writing a chart file failed.
    #[error("failed to write the Helm chart at {path}: {source}")]
    ChartWrite {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },

    /// The bundle's install strategy cannot be turned into objects to apply.
    #[error("failed to plan the install: {0}")]
    InstallPlan(String),

    /// An object the installer would apply or delete exists without the installer's label.
    #[error("failed to install: {kind} {name} exists and was not created by the installer")]
    NotInstalledByUs {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
    },
}

/// True when the API server answered 404 Not Found.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_404_from_the_api_server_is_not_found() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(is_not_found(&api(404)));
        assert!(!is_not_found(&api(403)));
        assert!(!is_not_found(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }
}
