//! A value read from files and swapped in when their bytes change: the machinery shared by the
//! configuration ([`crate::config::ConfigStore`]) and the serving certificate
//! ([`crate::tls::CertStore`]). The callers read the bytes and say how to parse them; this
//! module remembers the last bytes seen, keeps the value in force, and logs each distinct
//! refusal once.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::error::Error;

/// What offering new bytes did.
#[derive(Debug)]
pub(crate) enum Offered {
    /// The bytes are those seen last time.
    Unchanged,
    /// The bytes parsed; the new value is in force.
    Applied,
    /// The bytes did not parse; the previous value stays.
    Rejected(Error),
}

/// The value in force (if any), the bytes it came from and the last refusal logged.
///
/// `B` is whatever the caller reads (one file's bytes, or a pair of files).
pub(crate) struct Reloadable<T, B = Vec<u8>> {
    current: RwLock<Option<Arc<T>>>,
    last_seen: Mutex<Option<B>>,
    last_error: Mutex<Option<String>>,
}

impl<T, B: PartialEq + Clone> Reloadable<T, B> {
    /// A holder with `initial` in force and no bytes seen yet.
    pub(crate) fn new(initial: Option<Arc<T>>) -> Self {
        Self {
            current: RwLock::new(initial),
            last_seen: Mutex::new(None),
            last_error: Mutex::new(None),
        }
    }

    /// The value in force.
    pub(crate) fn current(&self) -> Option<Arc<T>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// True once a value is in force.
    pub(crate) fn is_loaded(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Put `value` in force if nothing is; true if that happened and `value` is `Some`.
    pub(crate) fn fill_if_empty(&self, value: Option<Arc<T>>) -> bool {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.is_none() && value.is_some() {
            *current = value;
            return true;
        }
        false
    }

    /// Forget the bytes seen last, so the next offer is parsed whatever it holds.
    pub(crate) fn forget_seen(&self) {
        *self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Parse `bytes` with `parse` unless they are those seen last time; put the result in force
    /// if it parsed. Bytes that fail to parse are remembered too, so they are refused once.
    pub(crate) fn offer(&self, bytes: B, parse: impl FnOnce(&B) -> Result<T, Error>) -> Offered {
        let mut last = self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.as_ref() == Some(&bytes) {
            return Offered::Unchanged;
        }
        *last = Some(bytes.clone());
        drop(last);
        match parse(&bytes) {
            Ok(value) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Some(Arc::new(value));
                Offered::Applied
            }
            Err(e) => Offered::Rejected(e),
        }
    }

    /// Run `poll` (which reports `Some(Ok(()))` when it applied something new, `Some(Err(_))`
    /// when it refused something, `None` otherwise) and log through `applied` / `rejected`,
    /// each distinct refusal once. Returns `"applied"` or `"rejected"` when something new
    /// happened. Concurrent calls are serialised, so one refusal is never logged twice.
    pub(crate) fn poll_and_log(
        &self,
        poll: impl FnOnce() -> Option<Result<(), Error>>,
        applied: impl FnOnce(),
        rejected: impl FnOnce(&str),
    ) -> Option<&'static str> {
        let mut last_error = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match poll()? {
            Ok(()) => {
                *last_error = None;
                applied();
                Some("applied")
            }
            Err(e) => {
                let message = e.to_string();
                if last_error.as_deref() == Some(message.as_str()) {
                    return None;
                }
                rejected(&message);
                *last_error = Some(message);
                Some("rejected")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn number(bytes: &[u8]) -> Result<u32, Error> {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Error::ParseConfig {
                path: PathBuf::from("n"),
                message: "not a number".into(),
            })
    }

    #[test]
    fn same_bytes_are_parsed_once_and_bad_bytes_keep_the_value_in_force() {
        let holder: Reloadable<u32> = Reloadable::new(None);
        assert!(matches!(
            holder.offer(b"1".to_vec(), |b: &Vec<u8>| number(b)),
            Offered::Applied
        ));
        assert!(matches!(
            holder.offer(b"1".to_vec(), |_| panic!("parsed the same bytes twice")),
            Offered::Unchanged
        ));
        assert!(matches!(
            holder.offer(b"x".to_vec(), |b: &Vec<u8>| number(b)),
            Offered::Rejected(_)
        ));
        assert_eq!(holder.current().as_deref(), Some(&1));
        assert!(matches!(
            holder.offer(b"x".to_vec(), |b: &Vec<u8>| number(b)),
            Offered::Unchanged
        ));
        holder.forget_seen();
        assert!(matches!(
            holder.offer(b"x".to_vec(), |b: &Vec<u8>| number(b)),
            Offered::Rejected(_)
        ));
    }

    #[test]
    fn each_distinct_refusal_is_reported_once() {
        let holder: Reloadable<u32> = Reloadable::new(None);
        let refuse = |message: &str| {
            Some(Err(Error::ParseConfig {
                path: PathBuf::from("n"),
                message: message.into(),
            }))
        };
        let mut logged = Vec::new();
        let mut poll =
            |outcome| holder.poll_and_log(|| outcome, || {}, |m| logged.push(m.to_owned()));
        assert_eq!(poll(refuse("a")), Some("rejected"));
        assert_eq!(poll(refuse("a")), None);
        assert_eq!(poll(refuse("b")), Some("rejected"));
        assert_eq!(poll(None), None);
        assert_eq!(poll(Some(Ok(()))), Some("applied"));
        assert_eq!(poll(refuse("b")), Some("rejected"));
        assert_eq!(logged.len(), 3);
    }

    #[test]
    fn filling_an_empty_holder_does_not_replace_a_value_in_force() {
        let holder: Reloadable<u32> = Reloadable::new(None);
        assert!(!holder.fill_if_empty(None));
        assert!(!holder.is_loaded());
        assert!(holder.fill_if_empty(Some(Arc::new(7))));
        assert!(!holder.fill_if_empty(Some(Arc::new(8))));
        assert_eq!(holder.current().as_deref(), Some(&7));
    }
}
