//! Signing the initialized-by mark. The format, the MAC and how the operator checks it are in the
//! `initializer-mark` crate; here is what the SDK feeds it: the key derived from the serving key
//! in force ([`KeyCell`], filled by the certificate store), the object's identity from the
//! request, and the time stamp.
//!
//! The time stamp must be close to the `creationTimestamp` the API server gives the object, and
//! must never be one the request chose (an author could otherwise obtain a genuine mark stamped
//! for a time to come and replay it then). So: a webhook CREATE is stamped with this process's
//! clock when the review arrives (the API server sets the creation time just after admission);
//! a webhook UPDATE with the stored object's creation time (`oldObject`, read from storage, not
//! the request's object, whose metadata the client wrote), but never later than that clock:
//! `/initialize` answers anyone who reaches it, and a review posted by hand can put any time in
//! its `oldObject`; the controller mode with the object's own creation time (it handles objects
//! already stored).

use std::sync::{Arc, PoisonError, RwLock};

use initializer_mark::{Identity, MarkKey};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The mark key in force, shared by the certificate store (which fills it whenever a serving
/// key is loaded) and the initializer (which signs with it).
#[derive(Default)]
pub(crate) struct KeyCell(RwLock<Option<Arc<MarkKey>>>);

impl std::fmt::Debug for KeyCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KeyCell")
            .field(&self.current().is_some())
            .finish()
    }
}

impl KeyCell {
    /// The key in force.
    pub(crate) fn current(&self) -> Option<Arc<MarkKey>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Put `key` in force.
    pub(crate) fn set(&self, key: MarkKey) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(key));
    }
}

/// Where a mark's time stamp comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// This time (Unix seconds): the arrival of a CREATE, or the stored object's creation.
    At(i64),
    /// The handled object's own `creationTimestamp` (the controller mode: the object is stored,
    /// the API server set it), or `fallback` should it have none.
    Created { fallback: i64 },
}

/// Seconds since the Unix epoch, by this process's clock.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Everything a handler run needs to mark the object it changed.
#[derive(Clone, Debug)]
pub(crate) struct Marker {
    pub(crate) initializer: Arc<str>,
    pub(crate) generation: Option<i64>,
    /// `None` until a serving key is loaded (only handlers called without a server, in tests):
    /// the mark is then written unsigned, which the operator does not trust.
    pub(crate) key: Option<Arc<MarkKey>>,
    /// The request's namespace (a create's object may leave its own empty).
    pub(crate) namespace: String,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) stamp: Stamp,
}

impl Marker {
    /// The entry for the object whose metadata (after the handler ran) is `meta`.
    pub(crate) fn entry(&self, meta: &ObjectMeta) -> String {
        let Some(key) = &self.key else {
            return initializer_mark::unsigned(&self.initializer, self.generation);
        };
        let namespace = if self.namespace.is_empty() {
            meta.namespace.as_deref().unwrap_or_default()
        } else {
            &self.namespace
        };
        let identity = Identity::at_admission(
            namespace,
            &self.group,
            &self.resource,
            meta.name.as_deref().unwrap_or_default(),
            meta.generate_name.as_deref().unwrap_or_default(),
        );
        let time = match self.stamp {
            Stamp::At(time) => time,
            Stamp::Created { fallback } => meta
                .creation_timestamp
                .as_ref()
                .map_or(fallback, |t| t.0.as_second()),
        };
        initializer_mark::sign(key, &self.initializer, self.generation, &identity, time)
    }
}

/// The `creationTimestamp` of an object given as JSON (a review's `oldObject`), in Unix seconds.
pub(crate) fn created_at(object: &serde_json::value::RawValue) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Only {
        metadata: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    }
    let only: Only = serde_json::from_str(object.get()).ok()?;
    Some(only.metadata?.creation_timestamp?.0.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;
    use initializer_mark::{Keys, Stored};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const T: i64 = 1_790_000_000;

    fn marker(stamp: Stamp, key: Option<MarkKey>) -> Marker {
        Marker {
            initializer: Arc::from("sidecar"),
            generation: Some(2),
            key: key.map(Arc::new),
            namespace: "apps".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            stamp,
        }
    }

    fn key() -> MarkKey {
        MarkKey::from_serving_key_der(b"a serving key")
    }

    fn stored<'a>(name: &'a str, generate_name: &'a str, created: i64) -> Stored<'a> {
        Stored {
            namespace: "apps",
            group: "apps",
            resource: "deployments",
            name,
            generate_name,
            created,
        }
    }

    /// The metadata of an object `web` whose `creationTimestamp` says `second`.
    fn web_created_at(second: i64) -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(second).unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_create_is_signed_for_its_name_or_generate_name_at_its_arrival() {
        let keys = Keys::current(key());
        // The creation time is what the client wrote: never the time stamp.
        let named = web_created_at(T + 3600);
        let entry = marker(Stamp::At(T), Some(key())).entry(&named);
        assert!(entry.starts_with(&format!("sidecar/2/t={T}/")), "{entry}");
        let check =
            |entry: &str, object| initializer_mark::verify_entry(&keys, "sidecar", entry, &object);
        assert_eq!(check(&entry, stored("web", "", T + 1)), Ok(()));
        let generated = ObjectMeta {
            generate_name: Some("web-".into()),
            namespace: Some("ignored-the-request-says".into()),
            ..Default::default()
        };
        let entry = marker(Stamp::At(T), Some(key())).entry(&generated);
        assert_eq!(check(&entry, stored("web-abcde", "web-", T)), Ok(()));
    }

    #[test]
    fn a_stored_object_is_stamped_with_its_creation() {
        let keys = Keys::current(key());
        let meta = web_created_at(T - 600);
        let entry = marker(Stamp::Created { fallback: T }, Some(key())).entry(&meta);
        assert_eq!(
            initializer_mark::verify_entry(&keys, "sidecar", &entry, &stored("web", "", T - 600)),
            Ok(())
        );
        let old = serde_json::value::to_raw_value(&serde_json::json!({
            "metadata": {"creationTimestamp": "2026-09-21T12:00:00Z"}
        }))
        .unwrap();
        assert_eq!(
            created_at(&old),
            Some(
                "2026-09-21T12:00:00Z"
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .unwrap()
                    .as_second()
            )
        );
        let bare = serde_json::value::to_raw_value(&serde_json::json!({"kind": "x"})).unwrap();
        assert_eq!(created_at(&bare), None);
    }

    #[test]
    fn without_a_key_the_mark_is_unsigned() {
        let meta = ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        };
        assert_eq!(marker(Stamp::At(T), None).entry(&meta), "sidecar/2");
        let cell = KeyCell::default();
        assert!(cell.current().is_none());
        cell.set(key());
        assert_eq!(cell.current().as_deref(), Some(&key()));
    }
}
