//! The answer to the operator's route check. Before it gives an initializer the spec's
//! `failurePolicy`, the operator registers one more webhook that calls this initializer's
//! Service at [`ROUTE_CHECK_PATH`] for a dry-run ConfigMap of its own, sends that dry run through
//! the API server, and waits for this answer: a denial naming the object. Only a call that went
//! the API server's way to the initializer can carry it, so the operator then knows that the API
//! server reaches the initializer through its Service.
//!
//! The path runs no handler and only ever denies dry runs: a denial of an object that is never
//! stored changes nothing, so whoever reaches the path gains nothing by it. Any other request
//! there is admitted unchanged.

use crate::review::{RequestIn, Response, Status, Verdict};

/// Where the route check's webhook calls the initializer.
pub const ROUTE_CHECK_PATH: &str = "/route-check";
/// First words of the answer, followed by the checked object's name.
pub const ROUTE_CHECK_ANSWER: &str = "route check reached";

/// The message of the answer to the route check of the object `name`.
pub fn answer_message(name: &str) -> String {
    format!("{ROUTE_CHECK_ANSWER} {name}")
}

/// The answer to a request sent to [`ROUTE_CHECK_PATH`]: a dry run is denied with
/// [`answer_message`] for its object's name; anything else is admitted.
pub(crate) fn answer(request: &RequestIn) -> Response {
    if request.dry_run != Some(true) {
        return Response::allow(request.uid.clone());
    }
    Response {
        uid: request.uid.clone(),
        allowed: false,
        patch: None,
        status: Some(Status {
            code: 403,
            message: answer_message(&request.name),
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
        let answered = answer(&request(Some(true)));
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
            let answered = answer(&request(dry_run));
            assert!(answered.allowed && answered.patch.is_none(), "{dry_run:?}");
        }
    }
}
