//! The answer to the operator's route check. Before it gives an initializer the spec's
//! `failurePolicy`, the operator registers one more webhook that calls this initializer's
//! Service at [`ROUTE_CHECK_PATH`] for a dry-run ConfigMap of its own, sends that dry run through
//! the API server, and waits for this answer: a denial naming the object. Only a call that went
//! the API server's way to the initializer can carry it, so the operator then knows that the API
//! server reaches the initializer through its Service.
//!
//! The answer also says whether the call came on a new connection ([`Carried`]). A firewall
//! lets a connection it admitted keep flowing after its rules change (a NetworkPolicy narrowed
//! under a registration), so only a call on a connection the API server dialled for it proves
//! the route as it is now. The server closes every connection that carried a route check, so the
//! next check cannot ride it again.
//!
//! The path runs no handler and only ever denies dry runs: a denial of an object that is never
//! stored changes nothing, so whoever reaches the path gains nothing by it. Any other request
//! there is admitted unchanged.

use crate::review::{RequestIn, Response, Status, Verdict};

/// Where the route check's webhook calls the initializer.
pub const ROUTE_CHECK_PATH: &str = "/route-check";
/// First words of the answer, followed by the checked object's name.
pub const ROUTE_CHECK_ANSWER: &str = "route check reached";

/// Which connection a route check came on, as this initializer's server saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// The connection's first request, come right after the connection was accepted: the
    /// caller dialled it for this call.
    NewConnection,
    /// A connection that carried requests before, or waited in the caller's pool before its
    /// first: it may predate what admits it now.
    ReusedConnection,
}

impl Carried {
    /// What the answer says after the object's name.
    pub fn words(self) -> &'static str {
        match self {
            Self::NewConnection => "on a new connection",
            Self::ReusedConnection => "on a reused connection",
        }
    }
}

/// The message of the answer to the route check of the object `name`, which came on
/// `carried` (`None`: a server of the caller's own, which does not tell).
pub fn answer_message(name: &str, carried: Option<Carried>) -> String {
    match carried {
        Some(carried) => format!("{ROUTE_CHECK_ANSWER} {name} {}", carried.words()),
        None => format!("{ROUTE_CHECK_ANSWER} {name}"),
    }
}

/// The answer to a request sent to [`ROUTE_CHECK_PATH`] on `carried`: a dry run is denied with
/// [`answer_message`] for its object's name; anything else is admitted.
pub(crate) fn answer(request: &RequestIn, carried: Option<Carried>) -> Response {
    if request.dry_run != Some(true) {
        return Response::allow(request.uid.clone());
    }
    Response {
        uid: request.uid.clone(),
        allowed: false,
        patch: None,
        status: Some(Status {
            code: 403,
            message: answer_message(&request.name, carried),
        }),
        warnings: Vec::new(),
        verdict: Verdict::Denied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(dry_run: Option<bool>) -> RequestIn {
        serde_json::from_value(serde_json::json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "route-check-00000000000000ab",
            "namespace": "sidecar-init",
            "operation": "CREATE",
            "dryRun": dry_run,
        }))
        .unwrap()
    }

    #[test]
    fn a_dry_run_is_denied_with_the_answer_naming_the_object() {
        let answered = answer(&request(Some(true)), None);
        assert!(!answered.allowed);
        assert_eq!(answered.uid, "u1");
        assert_eq!(
            answered.status.unwrap().message,
            "route check reached route-check-00000000000000ab"
        );
    }

    #[test]
    fn anything_stored_is_admitted_unchanged() {
        for dry_run in [Some(false), None] {
            let answered = answer(&request(dry_run), Some(Carried::NewConnection));
            assert!(answered.allowed && answered.patch.is_none(), "{dry_run:?}");
        }
    }

    #[test]
    fn the_answer_says_which_connection_carried_the_check() {
        let said = |carried| {
            answer(&request(Some(true)), Some(carried))
                .status
                .unwrap()
                .message
        };
        assert_eq!(
            said(Carried::NewConnection),
            "route check reached route-check-00000000000000ab on a new connection"
        );
        assert_eq!(
            said(Carried::ReusedConnection),
            "route check reached route-check-00000000000000ab on a reused connection"
        );
    }
}
