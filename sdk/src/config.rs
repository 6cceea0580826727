//! Typed configuration loaded from `config.yaml` in the mounted configuration directory and
//! reloaded when its content changes. A new file that does not parse is logged and ignored:
//! the configuration in force stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::reload::{Offered, Reloadable};

/// Name of the main configuration file inside the configuration directory (matches the
/// operator's process contract).
pub(crate) const CONFIG_FILE: &str = "config.yaml";

/// What a poll of the configuration file did.
#[derive(Debug)]
pub(crate) enum Reload {
    /// Nothing new to read.
    Unchanged,
    /// A new configuration is in force.
    Applied,
    /// The file is missing; the default (if any) is in force.
    Missing,
    /// The new content was refused; the previous configuration stays.
    Rejected(Error),
}

/// The configuration in force, shared by the server and every request.
pub(crate) struct ConfigStore<C> {
    value: Reloadable<C>,
    path: Mutex<Option<PathBuf>>,
    default: Option<Arc<C>>,
}

impl<C> std::fmt::Debug for ConfigStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigStore")
            .field("path", &self.path())
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl<C> ConfigStore<C> {
    /// The file this store reads, if any.
    pub(crate) fn path(&self) -> Option<PathBuf> {
        self.path
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The configuration in force, `None` until the first successful load.
    pub(crate) fn current(&self) -> Option<Arc<C>> {
        self.value.current()
    }

    /// True once a configuration is in force.
    pub(crate) fn is_loaded(&self) -> bool {
        self.value.is_loaded()
    }
}

impl<C: DeserializeOwned + Send + Sync + 'static> ConfigStore<C> {
    /// A store holding a fixed value: nothing is read from disk.
    pub(crate) fn fixed(value: C) -> Self {
        Self {
            value: Reloadable::new(Some(Arc::new(value))),
            path: Mutex::new(None),
            default: None,
        }
    }

    pub(crate) fn unloaded(default: Option<C>) -> Self {
        let default = default.map(Arc::new);
        Self {
            value: Reloadable::new(default.clone()),
            path: Mutex::new(None),
            default,
        }
    }

    /// Whether the store reads a file (as opposed to holding a fixed value).
    pub(crate) fn is_fixed(&self) -> bool {
        self.path().is_none() && self.default.is_none() && self.is_loaded()
    }

    pub(crate) fn set_path(&self, path: PathBuf) {
        *self.path.lock().unwrap_or_else(PoisonError::into_inner) = Some(path);
    }

    /// Read the file and apply it if its content changed and parses. Blocking (small file).
    pub(crate) fn poll(&self) -> Reload {
        let Some(path) = self.path() else {
            return if self.value.fill_if_empty(self.default.clone()) {
                Reload::Missing
            } else {
                Reload::Unchanged
            };
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.value.forget_seen();
                self.value.fill_if_empty(self.default.clone());
                return Reload::Missing;
            }
            Err(source) => return Reload::Rejected(Error::ReadFile { path, source }),
        };
        match self.value.offer(bytes, |bytes| parse(&path, bytes)) {
            Offered::Unchanged => Reload::Unchanged,
            Offered::Applied => Reload::Applied,
            Offered::Rejected(e) => Reload::Rejected(e),
        }
    }

    /// Poll and log what happened (each distinct error once); returns `"applied"` or
    /// `"rejected"` when something new happened.
    pub(crate) fn poll_and_log(&self) -> Option<&'static str> {
        self.value.poll_and_log(
            || match self.poll() {
                Reload::Applied => Some(Ok(())),
                Reload::Rejected(e) => Some(Err(e)),
                Reload::Unchanged | Reload::Missing => None,
            },
            || tracing::info!(path = ?self.path(), "configuration loaded"),
            |message| {
                tracing::error!(error = %message, "configuration refused; the previous one stays in force");
            },
        )
    }
}

/// Parse configuration text; an empty file means an empty mapping.
pub(crate) fn parse<C: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<C, Error> {
    let text = std::str::from_utf8(bytes).map_err(|e| Error::ParseConfig {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let text = if text.trim().is_empty() { "{}" } else { text };
    // Without the source snippet: the message goes into one log line, and the file's text
    // stays out of the logs.
    let plain = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options(text, plain).map_err(|e| Error::ParseConfig {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Cfg {
        image: String,
        #[serde(default)]
        replicas: u32,
    }

    /// A store as the server sets it up: unloaded, then pointed at its file.
    fn store_at(path: PathBuf, default: Option<Cfg>) -> ConfigStore<Cfg> {
        let store = ConfigStore::unloaded(default);
        store.set_path(path);
        store
    }

    #[test]
    fn valid_change_applies_and_invalid_change_keeps_the_old_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONFIG_FILE);
        let store: ConfigStore<Cfg> = store_at(path.clone(), None);
        assert!(matches!(store.poll(), Reload::Missing));
        assert!(!store.is_loaded());

        std::fs::write(&path, "image: nginx:1.8.1\n").unwrap();
        assert!(matches!(store.poll(), Reload::Applied));
        assert_eq!(store.current().unwrap().image, "nginx:1.8.1");
        assert!(matches!(store.poll(), Reload::Unchanged));

        std::fs::write(&path, "image: [not, a, string\n").unwrap();
        assert!(matches!(
            store.poll(),
            Reload::Rejected(Error::ParseConfig { .. })
        ));
        assert_eq!(store.current().unwrap().image, "nginx:1.8.1");

        std::fs::write(&path, "image: envoy\nreplicas: 2\n").unwrap();
        assert!(matches!(store.poll(), Reload::Applied));
        assert_eq!(
            *store.current().unwrap(),
            Cfg {
                image: "envoy".into(),
                replicas: 2
            }
        );
    }

    #[test]
    fn missing_file_uses_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_at(
            dir.path().join(CONFIG_FILE),
            Some(Cfg {
                image: "d".into(),
                replicas: 0,
            }),
        );
        assert!(matches!(store.poll(), Reload::Missing));
        assert_eq!(store.current().unwrap().image, "d");
    }

    #[test]
    fn empty_file_is_an_empty_mapping() {
        #[derive(Debug, Deserialize, Default)]
        struct AllDefault {
            #[serde(default)]
            names: Vec<String>,
        }
        let parsed: AllDefault = parse(Path::new("x"), b"  \n").unwrap();
        assert!(parsed.names.is_empty());
    }
}
