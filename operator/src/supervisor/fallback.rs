//! The fallback policy as the supervisor runs it: installed when, refused why, and whether a
//! step out of the path may go ahead.

use std::time::Instant;

use super::FALLBACK_SETTLE;
use crate::build::FallbackPolicy;
use crate::status::FallbackView;

/// The fallback as the supervisor runs it.
#[derive(Clone, Debug, Default)]
pub(super) struct FallbackRun {
    /// When the API server accepted the policy and binding.
    pub(super) installed_at: Option<Instant>,
    /// What was applied.
    pub(super) applied: Option<FallbackPolicy>,
    /// The API server does not serve ValidatingAdmissionPolicy.
    pub(super) unsupported: bool,
    /// The last failure to install.
    pub(super) failed: Option<String>,
}

impl FallbackRun {
    pub(super) fn view(&self, now: Instant) -> FallbackView {
        if self.unsupported {
            FallbackView::Unsupported
        } else if let Some(at) = self.installed_at {
            if now >= at + FALLBACK_SETTLE {
                FallbackView::InForce
            } else {
                FallbackView::Installing
            }
        } else if let Some(why) = &self.failed {
            FallbackView::Failed(why.clone())
        } else {
            FallbackView::NotNeeded
        }
    }

    /// Whether stepping out of the path may go ahead: the fallback is in force, or it cannot
    /// be (unsupported, or refused: failing open comes first).
    pub(super) fn ready(&self, now: Instant) -> bool {
        !matches!(
            self.view(now),
            FallbackView::Installing | FallbackView::NotNeeded
        )
    }
}
