//! The ClusterServiceVersion (`operators.coreos.com/v1alpha1`): the subset of OLM's type this
//! project writes and reads, with the embedded Kubernetes objects typed by k8s-openapi.
//!
//! The generator writes this type and the installer and the validator read it. Every field but
//! `apiVersion` and `kind` defaults when absent, so a CSV missing catalog fields still decodes
//! and the validator names each one; a value of the wrong type (a string where a number belongs)
//! fails the decoding, which the validator reports as the CSV not being this type.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// API version of the ClusterServiceVersion.
pub const API_VERSION: &str = "operators.coreos.com/v1alpha1";
/// Kind of the ClusterServiceVersion.
pub const KIND: &str = "ClusterServiceVersion";
/// The only install strategy OLM knows.
pub const DEPLOYMENT_STRATEGY: &str = "deployment";

/// A ClusterServiceVersion: everything OLM needs to show, install and upgrade one version.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterServiceVersion {
    /// `operators.coreos.com/v1alpha1`.
    pub api_version: String,
    /// `ClusterServiceVersion`.
    pub kind: String,
    /// Name (`<package>.v<version>`), namespace-less, and the OperatorHub annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The description, owned APIs, install strategy and install modes.
    #[serde(default)]
    pub spec: CsvSpec,
}

/// The body of a ClusterServiceVersion.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct CsvSpec {
    /// Human name shown in catalogs.
    pub display_name: String,
    /// Long description, markdown.
    pub description: String,
    /// Semantic version of the operator.
    pub version: String,
    /// Oldest Kubernetes version the operator supports (semver).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_kube_version: Option<String>,
    /// The CSV this version upgrades (OLM's `replaces`), the previous release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// `alpha`, `beta`, `stable`…
    pub maturity: String,
    /// Who publishes the operator.
    pub provider: Provider,
    /// People to contact.
    pub maintainers: Vec<Maintainer>,
    /// Documentation and source links.
    pub links: Vec<Link>,
    /// Search keywords.
    pub keywords: Vec<String>,
    /// The icon catalogs show next to the operator's name.
    pub icon: Vec<Icon>,
    /// APIs the operator owns and requires.
    pub customresourcedefinitions: CustomResourceDefinitions,
    /// How OLM installs the operator.
    pub install: NamedInstallStrategy,
    /// Which OperatorGroup target namespace shapes the operator supports.
    pub install_modes: Vec<InstallMode>,
    /// Every image the operator runs or deploys, for disconnected mirroring.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub related_images: Vec<RelatedImage>,
}

/// Who publishes the operator: a name and, optionally, a web page.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Provider {
    /// Publisher name.
    pub name: String,
    /// Publisher home page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Someone to contact about the operator.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Maintainer {
    /// Name of the maintainer or team.
    pub name: String,
    /// Contact address.
    pub email: String,
}

/// A link the catalog page shows (documentation, source).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Link {
    /// Link text.
    pub name: String,
    /// Where the link points.
    pub url: String,
}

/// An icon, base64 encoded.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Icon {
    /// The image, base64 encoded.
    pub base64data: String,
    /// Its media type (`image/svg+xml`, `image/png`…).
    pub mediatype: String,
}

/// Owned and required APIs.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct CustomResourceDefinitions {
    /// CRDs this operator owns (shipped in the bundle).
    pub owned: Vec<CrdDescription>,
    /// CRDs owned by other operators that this one needs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<CrdDescription>,
}

/// Describes one owned CRD version for catalogs and consoles.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct CrdDescription {
    /// Full CRD name (`<plural>.<group>`).
    pub name: String,
    /// Version described.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Human name.
    pub display_name: String,
    /// One-paragraph description.
    pub description: String,
    /// Kinds the operator creates for each instance.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApiResourceReference>,
    /// Spec fields worth showing, with UI hints.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spec_descriptors: Vec<Descriptor>,
    /// Status fields worth showing, with UI hints.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_descriptors: Vec<Descriptor>,
}

/// A kind created on behalf of a custom resource.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct ApiResourceReference {
    /// Kind.
    pub kind: String,
    /// Plural name.
    pub name: String,
    /// API version.
    pub version: String,
}

/// A spec or status descriptor.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Descriptor {
    /// Dotted path below `spec` or `status`.
    pub path: String,
    /// Human name.
    pub display_name: String,
    /// What the field means.
    pub description: String,
    /// UI hints (`urn:alm:descriptor:…`).
    #[serde(rename = "x-descriptors", skip_serializing_if = "Vec::is_empty")]
    pub x_descriptors: Vec<String>,
}

/// How OLM installs the operator: the `deployment` strategy and its Deployments and RBAC.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct NamedInstallStrategy {
    /// Always [`DEPLOYMENT_STRATEGY`].
    pub strategy: String,
    /// Deployments and RBAC.
    pub spec: StrategyDetailsDeployment,
}

/// Deployments and RBAC of the `deployment` install strategy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct StrategyDetailsDeployment {
    /// Deployments OLM creates in the install namespace.
    pub deployments: Vec<StrategyDeploymentSpec>,
    /// Namespaced RBAC, granted in the install namespace.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<StrategyDeploymentPermissions>,
    /// Cluster-wide RBAC.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_permissions: Vec<StrategyDeploymentPermissions>,
}

/// One Deployment of the install strategy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct StrategyDeploymentSpec {
    /// Deployment name.
    pub name: String,
    /// Labels of the Deployment object itself.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub label: BTreeMap<String, String>,
    /// The Deployment's spec.
    pub spec: DeploymentSpec,
}

/// Rules granted to one service account.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct StrategyDeploymentPermissions {
    /// The service account (created by OLM in the install namespace).
    pub service_account_name: String,
    /// What it may do.
    pub rules: Vec<PolicyRule>,
}

/// Whether one OperatorGroup shape is supported.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct InstallMode {
    /// `OwnNamespace`, `SingleNamespace`, `MultiNamespace` or `AllNamespaces`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Supported or not.
    pub supported: bool,
}

/// An image the operator uses.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct RelatedImage {
    /// Short name.
    pub name: String,
    /// Full reference.
    pub image: String,
}
