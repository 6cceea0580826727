//! API faults on purpose: a programmable table of rules that make chosen requests fail or wait,
//! and a switch that drops every open watch stream.

use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a matching request suffers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum FaultAction {
    /// Answer with this HTTP code and a `metav1.Status` body (reason derived from the code).
    Error {
        /// HTTP status code.
        code: u16,
        /// Status message.
        #[serde(default)]
        message: Option<String>,
    },
    /// Wait this long, then serve the request normally.
    Delay {
        /// Milliseconds.
        millis: u64,
    },
}

/// One rule of the fault table. Unset match fields match everything.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// Assigned by the table.
    pub id: u64,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: Option<String>,
    /// API group (`""` for core).
    pub group: Option<String>,
    /// Plural resource name.
    pub resource: Option<String>,
    /// Subresource (`status`).
    pub subresource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// What happens.
    pub action: Option<FaultAction>,
    /// How many more requests it hits; `None` until cleared.
    pub times: Option<u32>,
}

/// The request a rule is matched against.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// Verb.
    pub verb: &'a str,
    /// Group.
    pub group: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource or empty.
    pub subresource: &'a str,
    /// Namespace or empty.
    pub namespace: &'a str,
    /// Name or empty.
    pub name: &'a str,
}

impl FaultRule {
    fn matches(&self, r: &RequestInfo<'_>) -> bool {
        let ok = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        ok(&self.verb, r.verb)
            && ok(&self.group, r.group)
            && ok(&self.resource, r.resource)
            && ok(&self.subresource, r.subresource)
            && ok(&self.namespace, r.namespace)
            && ok(&self.name, r.name)
    }
}

/// The fault table.
#[derive(Debug)]
pub struct Faults {
    rules: Mutex<(u64, Vec<FaultRule>)>,
    drop_watches: tokio::sync::watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new((0, Vec::new())),
            drop_watches: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Faults {
    /// Adds a rule; returns its id.
    pub fn add(&self, mut rule: FaultRule) -> u64 {
        let mut g = self.rules.lock();
        g.0 += 1;
        rule.id = g.0;
        g.1.push(rule);
        g.0
    }

    /// Removes one rule; whether it existed.
    pub fn remove(&self, id: u64) -> bool {
        let mut g = self.rules.lock();
        let before = g.1.len();
        g.1.retain(|r| r.id != id);
        g.1.len() != before
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules.lock().1.clear();
    }

    /// The current rules.
    pub fn list(&self) -> Vec<FaultRule> {
        self.rules.lock().1.clone()
    }

    /// The action of the first rule matching `req`, counting the hit.
    pub fn check(&self, req: &RequestInfo<'_>) -> Option<FaultAction> {
        let mut g = self.rules.lock();
        let idx =
            g.1.iter()
                .position(|r| r.matches(req) && r.times != Some(0))?;
        let rule = &mut g.1[idx];
        let action = rule.action.clone();
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
            if *t == 0 {
                g.1.remove(idx);
            }
        }
        action
    }

    /// Ends every open watch stream now (clients see the stream close and re-watch).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|g| *g += 1);
    }

    /// A receiver that changes whenever watches must be dropped.
    pub fn watch_dropper(&self) -> tokio::sync::watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }
}

/// The reason a real API server gives with `code`.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

/// The Status body of an injected error.
pub fn error_status(code: u16, message: Option<&str>) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.unwrap_or("injected fault"), "reason": reason_for(code), "code": code,
    })
}

/// The delay of a delay action.
pub fn delay(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(verb: &'a str, name: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            verb,
            group: "",
            resource: "pods",
            subresource: "",
            namespace: "default",
            name,
        }
    }

    #[test]
    fn a_rule_with_a_count_expires_after_that_many_hits() {
        let f = Faults::default();
        f.add(FaultRule {
            verb: Some("get".into()),
            action: Some(FaultAction::Error {
                code: 500,
                message: None,
            }),
            times: Some(2),
            ..Default::default()
        });
        assert!(f.check(&req("list", "")).is_none());
        assert!(f.check(&req("get", "a")).is_some());
        assert!(f.check(&req("get", "a")).is_some());
        assert!(f.check(&req("get", "a")).is_none());
        assert!(f.list().is_empty());
    }

    #[test]
    fn a_rule_without_a_count_stays_until_removed() {
        let f = Faults::default();
        let id = f.add(FaultRule {
            name: Some("a".into()),
            action: Some(FaultAction::Delay { millis: 5 }),
            ..Default::default()
        });
        for _ in 0..5 {
            assert_eq!(
                f.check(&req("get", "a")),
                Some(FaultAction::Delay { millis: 5 })
            );
        }
        assert!(f.check(&req("get", "b")).is_none());
        assert!(f.remove(id));
        assert!(f.check(&req("get", "a")).is_none());
    }
}
