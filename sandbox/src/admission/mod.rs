//! Admission: calls the matching mutating, then validating, webhooks for a write.
//!
//! Placeholder interface agreed between the API server and the admission module; the admission
//! owner replaces the body. The API server calls [`Admission::admit`] for every create and update
//! (and delete where rules ask for it) after defaulting and before validation and storage.

use serde_json::Value;

use crate::view::ClusterView;

/// The operation being admitted, as AdmissionReview spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`
    Create,
    /// `UPDATE`
    Update,
    /// `DELETE`
    Delete,
    /// `CONNECT`
    Connect,
}

/// Who makes the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// Groups the user belongs to.
    pub groups: Vec<String>,
}

/// Everything admission needs to know about one write.
#[derive(Clone, Debug)]
pub struct Attributes {
    /// API group of the object's kind; empty for core.
    pub group: String,
    /// API version of the request.
    pub version: String,
    /// Kind of the object.
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`, `scale`), empty for the main resource.
    pub subresource: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Object name (may be empty on create with `generateName`).
    pub name: String,
    /// Operation.
    pub operation: Operation,
    /// The new object (create, update); `None` on delete.
    pub object: Option<Value>,
    /// The stored object (update, delete).
    pub old_object: Option<Value>,
    /// `dryRun=All` was requested.
    pub dry_run: bool,
    /// The requesting user.
    pub user: UserInfo,
}

/// What admission decided.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Proceed, storing `object` (the input with every mutating webhook's patch applied).
    Allowed {
        /// The possibly mutated object (`None` on delete).
        object: Option<Value>,
        /// Warnings to return to the client in `Warning` headers.
        warnings: Vec<String>,
    },
    /// Refuse with a `metav1.Status` body (code, reason, message as the real API server forms them).
    Denied(Value),
}

/// The admission chain.
#[derive(Clone, Debug, Default)]
pub struct Admission {}

impl Admission {
    /// Runs mutating then validating webhooks that match `attrs`.
    pub async fn admit(&self, _view: &dyn ClusterView, attrs: Attributes) -> Outcome {
        Outcome::Allowed { object: attrs.object, warnings: Vec::new() }
    }
}
