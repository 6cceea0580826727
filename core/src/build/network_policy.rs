//! The NetworkPolicy in front of an initializer's pods (`--network-policy=on` or `auto`): ingress
//! to the serving port only from the operator's own pods (its probe) and from the API server's
//! addresses (`--api-server-cidrs`, the control plane's range, which differs per cluster; under
//! `auto` without them, the addresses of the `kubernetes` Service, [`api_server_ranges`]).
//! Without it, any pod that can reach the initializer's Service can open connections to it; the
//! SDK's server makes room for the API server and the probe when that happens (see
//! `kube_initializer`'s connection slots), and the policy keeps such pods out altogether where
//! the cluster's network enforces policies.
//!
//! A policy written or changed under a registered initializer may leave the API server out (a
//! wrong range): [`changes_route`] tells the reconcile when a write must wait until the API
//! server fails open for it (not when it only admits more), and [`held`] is what stays written
//! meanwhile. Under `auto`, a policy the API server's calls are not seen passing is withdrawn and
//! not written again for the same ranges ([`is_withdrawn`]), and an address the API server
//! listed stays admitted for a while after it left the list ([`SeenRanges`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use initializer_crds::WithdrawnNetworkPolicy;
use initializer_crds::constants::INITIALIZER_PORT;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{meta, selector_labels};
use crate::ownership::{Ownership, controller_uid, ownership};
use crate::validate::Validated;

/// The label the API server sets on every namespace to its own name: nobody can give another
/// namespace the operator's name, unlike any label of their choosing.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Who may reach an initializer's pods when the operator writes a NetworkPolicy for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkPolicySettings {
    /// The namespace the operator's pods run in.
    pub operator_namespace: String,
    /// The labels of the operator's pods (the Deployment's selector: nobody but whoever may
    /// create pods in the operator's namespace can give a pod there these labels).
    pub operator_pod_labels: BTreeMap<String, String>,
    /// Where the API server's calls come from, in CIDR notation: `--api-server-cidrs`, or under
    /// `auto` without them `None` until the reconcile fills in [`api_server_ranges`].
    pub api_server_cidrs: Option<Vec<Cidr>>,
    /// `on` or `auto`.
    pub mode: NetworkPolicyMode,
}

impl NetworkPolicySettings {
    /// Whether the API server's ranges are to be read from the cluster ([`api_server_ranges`]).
    pub fn reads_ranges(&self) -> bool {
        self.api_server_cidrs.is_none()
    }

    /// Whether a policy the API server's calls are not seen passing is withdrawn (`auto`).
    pub fn withdraws(&self) -> bool {
        self.mode == NetworkPolicyMode::Auto
    }

    /// These settings with the API server's ranges read from the cluster.
    pub fn with_ranges(&self, ranges: Vec<Cidr>) -> Self {
        Self {
            api_server_cidrs: Some(ranges),
            ..self.clone()
        }
    }
}

/// An address range in CIDR notation (`10.0.0.0/24`, `fd00::/64`), checked when parsed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cidr(String);

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let wrong = || format!("{s:?} is not a CIDR such as 10.0.0.0/24 or fd00::/64");
        let (address, prefix) = s.split_once('/').ok_or_else(wrong)?;
        let address: IpAddr = address.parse().map_err(|_| wrong())?;
        let prefix: u8 = prefix.parse().map_err(|_| wrong())?;
        let longest = if address.is_ipv4() { 32 } else { 128 };
        if prefix > longest {
            return Err(wrong());
        }
        Ok(Self(format!("{address}/{prefix}")))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a comma-separated list of CIDRs.
pub fn parse_cidrs(s: &str) -> Result<Vec<Cidr>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::parse)
        .collect()
}

/// `--api-server-cidrs`: one CIDR at least (a policy admitting no API server address would cut
/// every review off while the operator's probe, which it admits, still passes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cidrs(pub Vec<Cidr>);

impl std::str::FromStr for Cidrs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let cidrs = parse_cidrs(s)?;
        if cidrs.is_empty() {
            return Err("name at least one CIDR, such as 10.0.0.0/24".into());
        }
        Ok(Self(cidrs))
    }
}

/// `--network-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkPolicyMode {
    /// A NetworkPolicy in front of every initializer's pods, admitting `--api-server-cidrs`.
    On,
    /// None (one written before is removed).
    Off,
    /// As `on`, admitting `--api-server-cidrs` or else the addresses of the `kubernetes`
    /// Service; a policy the API server's calls are not seen passing within the route deadline
    /// is withdrawn, and not written again while those ranges stay.
    Auto,
}

/// The Service whose endpoints are the API server's addresses, in [`API_SERVER_NAMESPACE`]; its
/// EndpointSlice has the same name.
pub const API_SERVER_SERVICE: &str = "kubernetes";
/// Where [`API_SERVER_SERVICE`] is.
pub const API_SERVER_NAMESPACE: &str = "default";

/// What the flags ask for: `None` when off; else the operator's pods in `operator_namespace` (by
/// the labels of its Deployment's selector) and the API server's ranges, if given.
pub fn settings(
    mode: NetworkPolicyMode,
    api_server_cidrs: Option<&Cidrs>,
    operator_namespace: &str,
) -> Option<NetworkPolicySettings> {
    (mode != NetworkPolicyMode::Off).then(|| NetworkPolicySettings {
        operator_namespace: operator_namespace.to_string(),
        operator_pod_labels: initializer_packaging::manifest::selector_labels(),
        api_server_cidrs: api_server_cidrs.map(|c| c.0.clone()),
        mode,
    })
}

/// The API server's addresses, one range of one address each, from the EndpointSlice of the
/// `kubernetes` Service (the API servers write their own addresses there, whatever their
/// number). Most clusters' API servers call webhooks from these addresses; where one calls from
/// another (a konnectivity tunnel, a NAT), the route check says so and `auto` withdraws the policy.
pub fn api_server_ranges(slice: &EndpointSlice) -> Vec<Cidr> {
    let mut ranges: Vec<Cidr> = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|endpoint| &endpoint.addresses)
        .filter_map(|address| address.parse::<IpAddr>().ok())
        .map(|address| {
            let prefix = if address.is_ipv4() { 32 } else { 128 };
            Cidr(format!("{address}/{prefix}"))
        })
        .collect();
    ranges.sort();
    ranges.dedup();
    ranges
}

/// The address ranges `policy` admits, in the order written.
pub fn admitted_ranges(policy: &NetworkPolicy) -> Vec<String> {
    peers(policy)
        .filter_map(|peer| Some(peer.ip_block.as_ref()?.cidr.clone()))
        .collect()
}

/// Whether `desired` admits the API server only from ranges of the policy `withdrawn` under
/// `auto` (the same, or fewer: a narrower policy passes none of the calls the withdrawn one did
/// not, as when an address it kept after the API server stopped listing it is dropped): it is
/// not written again.
pub fn is_withdrawn(desired: &NetworkPolicy, withdrawn: Option<&WithdrawnNetworkPolicy>) -> bool {
    withdrawn.is_some_and(|withdrawn| {
        let admitted = admitted_ranges(desired);
        !admitted.is_empty()
            && admitted
                .iter()
                .all(|range| withdrawn.api_server_cidrs.contains(range))
    })
}

/// The record of `policy` withdrawn at `at`, the last route check having seen `last_route_check`.
pub fn withdrawal(
    policy: &NetworkPolicy,
    at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    last_route_check: &str,
) -> WithdrawnNetworkPolicy {
    WithdrawnNetworkPolicy {
        api_server_cidrs: admitted_ranges(policy),
        withdrawn_at: at,
        last_route_check: last_route_check.to_string(),
    }
}

/// The NetworkPolicy of one Initializer: its pods (the Service's selector) take ingress on the
/// serving port from the operator's pods and the API server's ranges, and from nothing else.
pub fn network_policy(
    v: &Validated,
    settings: &NetworkPolicySettings,
    owner: Option<&OwnerReference>,
) -> NetworkPolicy {
    let operator = NetworkPolicyPeer {
        // Both selectors in one peer: pods with these labels in that namespace only.
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_string(),
                settings.operator_namespace.clone(),
            )])),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(settings.operator_pod_labels.clone()),
            match_expressions: None,
        }),
        ip_block: None,
    };
    let api_server = settings
        .api_server_cidrs
        .iter()
        .flatten()
        .map(|cidr| NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.to_string(),
                except: None,
            }),
            ..Default::default()
        });
    NetworkPolicy {
        metadata: meta(v, &v.names.base, owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(v)),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(std::iter::once(operator).chain(api_server).collect()),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(INITIALIZER_PORT))),
                    protocol: Some("TCP".to_string()),
                    end_port: None,
                }]),
            }]),
            egress: None,
        }),
    }
}

/// Whether writing `desired` over `live` (what the cluster holds under its name) changes who may
/// reach the initializer's pods: a policy where none was, or this Initializer's policy with
/// another spec, unless it only admits address ranges beside those `live` admits. The API
/// server's path must then be proven again. Someone else's object is no change of ours: the
/// write refuses it. Removing a policy, or adding a range, only widens the path.
pub fn changes_route(desired: &NetworkPolicy, live: Option<&NetworkPolicy>) -> bool {
    let Some(live) = live else {
        return true;
    };
    is_ours(desired, live) && live.spec != desired.spec && !only_adds_ranges(desired, live)
}

/// Whether writing `desired` over `live`, this Initializer's policy, only adds address ranges
/// (no route change, [`changes_route`]): a route still being proven then starts over, the
/// policy in force being another.
pub fn widens(desired: &NetworkPolicy, live: Option<&NetworkPolicy>) -> bool {
    live.is_some_and(|live| {
        is_ours(desired, live) && live.spec != desired.spec && only_adds_ranges(desired, live)
    })
}

/// Whether `desired` is `live` with address ranges added: the same rules and peers, and every
/// `ipBlock` `live` admits among those `desired` admits.
fn only_adds_ranges(desired: &NetworkPolicy, live: &NetworkPolicy) -> bool {
    let blocks = |policy: &NetworkPolicy| -> Vec<IPBlock> {
        peers(policy)
            .filter_map(|peer| peer.ip_block.clone())
            .collect()
    };
    let without_blocks = |policy: &NetworkPolicy| {
        let mut spec = policy.spec.clone().unwrap_or_default();
        for rule in spec.ingress.iter_mut().flatten() {
            if let Some(from) = rule.from.as_mut() {
                from.retain(|peer| peer.ip_block.is_none());
            }
        }
        spec
    };
    let added = blocks(desired);
    without_blocks(desired) == without_blocks(live)
        && blocks(live).iter().all(|block| added.contains(block))
}

/// Every peer `policy` admits ingress from.
fn peers(policy: &NetworkPolicy) -> impl Iterator<Item = &NetworkPolicyPeer> {
    policy
        .spec
        .iter()
        .flat_map(|spec| spec.ingress.iter().flatten())
        .flat_map(|rule| rule.from.iter().flatten())
}

/// How long an address of the API server stays admitted after it left the `kubernetes`
/// Service's EndpointSlice: an API server replica that restarts leaves the list and comes back
/// with the same address, and is meanwhile kept out of no policy (its calls would fail as the
/// spec's `failurePolicy` says until the policies followed), nor does every policy change twice.
pub const RANGE_KEPT_FOR: Duration = Duration::from_secs(600);

/// The API server's ranges as read from the cluster ([`api_server_ranges`]), each with when it
/// was last listed.
#[derive(Clone, Debug, Default)]
pub struct SeenRanges(BTreeMap<Cidr, Instant>);

impl SeenRanges {
    /// Records `listed`, read at `now`, and returns the ranges a policy admits: every one listed
    /// within [`RANGE_KEPT_FOR`] before `now`, sorted. `listed` empty (the slice unreadable or
    /// bare) is no reading: the caller leaves the policies as they are.
    pub fn admitted(&mut self, listed: &[Cidr], now: Instant) -> Vec<Cidr> {
        for range in listed {
            self.0.insert(range.clone(), now);
        }
        self.0
            .retain(|_, seen| now.saturating_duration_since(*seen) < RANGE_KEPT_FOR);
        self.0.keys().cloned().collect()
    }
}

/// Whether `live` is the policy of the Initializer `desired` is written for (its labels and
/// controller reference), not someone else's of the same name.
pub fn is_ours(desired: &NetworkPolicy, live: &NetworkPolicy) -> bool {
    ownership(Some(&live.metadata), controller_uid(&desired.metadata)) == Ownership::Ours
}

/// What to write while a change of route waits ([`changes_route`]): the live policy's spec under
/// the desired metadata, so that the write changes nothing of who may reach the pods, or no
/// policy when none is live.
pub fn held(desired: &NetworkPolicy, live: Option<&NetworkPolicy>) -> Option<NetworkPolicy> {
    live.map(|live| NetworkPolicy {
        metadata: desired.metadata.clone(),
        spec: live.spec.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::tests::{TLS, settings as build_settings};
    use crate::build::{Settings, build};
    use crate::validate::{Validated, tests::sidecar, validate};

    fn validated() -> Validated {
        validate(&sidecar().spec, "initializer-system", "sidecar").unwrap()
    }

    fn policy_settings(cidrs: &[&str]) -> NetworkPolicySettings {
        NetworkPolicySettings {
            operator_namespace: "initializer-system".into(),
            operator_pod_labels: BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "initializer-operator".to_string(),
            )]),
            api_server_cidrs: Some(cidrs.iter().map(|c| c.parse().unwrap()).collect()),
            mode: NetworkPolicyMode::On,
        }
    }

    #[test]
    fn network_policy_admits_only_the_operators_pods_and_the_api_server_on_the_serving_port() {
        let v = validated();
        let policy = network_policy(&v, &policy_settings(&["10.0.0.0/24", "fd00::/64"]), None);
        assert_eq!(policy.metadata.name.as_deref(), Some(v.names.base.as_str()));
        assert_eq!(
            policy.metadata.namespace.as_deref(),
            Some(v.namespace.as_str())
        );
        let spec = policy.spec.unwrap();
        assert_eq!(
            spec.pod_selector.unwrap().match_labels,
            Some(selector_labels(&v)),
            "the policy selects exactly the Service's pods"
        );
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        assert!(spec.egress.is_none(), "egress is not restricted");
        let [rule] = spec.ingress.unwrap().try_into().unwrap();
        let [port] = rule.ports.unwrap().try_into().unwrap();
        assert_eq!(port.port, Some(IntOrString::Int(8443)));
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        let [operator, v4, v6] = rule.from.unwrap().try_into().unwrap();
        // The namespace by the name the API server sets, and the pods by the operator's labels,
        // in one peer (two peers would admit every pod of the namespace, and every namespace's
        // pods with those labels).
        assert_eq!(
            operator.namespace_selector.unwrap().match_labels.unwrap(),
            BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_string(),
                "initializer-system".to_string()
            )])
        );
        assert_eq!(
            operator.pod_selector.unwrap().match_labels.unwrap(),
            policy_settings(&[]).operator_pod_labels
        );
        assert!(operator.ip_block.is_none());
        assert_eq!(v4.ip_block.unwrap().cidr, "10.0.0.0/24");
        assert_eq!(v6.ip_block.unwrap().cidr, "fd00::/64");
        assert!(v6.namespace_selector.is_none() && v6.pod_selector.is_none());
    }

    /// The policy as the API server stores it: what was written, with a UID.
    fn stored(policy: &NetworkPolicy) -> NetworkPolicy {
        let mut live = policy.clone();
        live.metadata.uid = Some("policy-uid".into());
        live.metadata.resource_version = Some("7".into());
        live
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "initializer.dev/v1alpha1".into(),
            kind: "Initializer".into(),
            name: "sidecar".into(),
            uid: "initializer-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn a_new_policy_or_another_range_changes_the_route_and_the_same_one_does_not() {
        let v = validated();
        let owner = owner();
        let desired = network_policy(&v, &policy_settings(&["10.0.0.0/24"]), Some(&owner));
        assert!(changes_route(&desired, None), "a policy where none was");
        assert!(
            !changes_route(&desired, Some(&stored(&desired))),
            "as written"
        );
        let narrower = network_policy(&v, &policy_settings(&["10.0.0.1/32"]), Some(&owner));
        assert!(
            changes_route(&narrower, Some(&stored(&desired))),
            "another range"
        );
        let mut someone_elses = stored(&desired);
        someone_elses.metadata.owner_references = None;
        assert!(
            !changes_route(&narrower, Some(&someone_elses)),
            "someone else's object is left to the write, which refuses it"
        );
    }

    #[test]
    fn an_added_range_is_no_route_change_and_a_removed_or_replaced_one_is() {
        let v = validated();
        let owner = owner();
        let policy = |cidrs: &[&str]| network_policy(&v, &policy_settings(cidrs), Some(&owner));
        let live = stored(&policy(&["10.0.0.1/32"]));
        let wider = policy(&["10.0.0.1/32", "10.0.0.2/32"]);
        assert!(
            !changes_route(&wider, Some(&live)) && widens(&wider, Some(&live)),
            "another API server admitted beside the first"
        );
        assert!(!widens(&wider, None), "where none was: a route change");
        assert!(!widens(&wider, Some(&stored(&wider))), "as written");
        let both = stored(&policy(&["10.0.0.1/32", "10.0.0.2/32"]));
        assert!(
            changes_route(&policy(&["10.0.0.2/32"]), Some(&both))
                && !widens(&policy(&["10.0.0.2/32"]), Some(&both)),
            "one left out"
        );
        assert!(
            changes_route(&policy(&["10.0.0.0/24"]), Some(&live)),
            "a range in place of an address: not the same block"
        );
        let mut other_port = policy(&["10.0.0.1/32", "10.0.0.2/32"]);
        other_port.spec.as_mut().unwrap().ingress.as_mut().unwrap()[0].ports = None;
        assert!(
            changes_route(&other_port, Some(&live)),
            "more ranges, and every port: more than ranges changed"
        );
        let mut other_pods = policy(&["10.0.0.1/32", "10.0.0.2/32"]);
        other_pods.spec.as_mut().unwrap().ingress.as_mut().unwrap()[0]
            .from
            .as_mut()
            .unwrap()[0]
            .pod_selector = None;
        assert!(
            changes_route(&other_pods, Some(&live)),
            "more ranges, and other pods: more than ranges changed"
        );
    }

    #[test]
    fn an_address_the_api_server_stopped_listing_stays_admitted_for_a_while() {
        let cidr = |s: &str| s.parse::<Cidr>().unwrap();
        let start = Instant::now();
        let mut seen = SeenRanges::default();
        let (a, b) = (cidr("10.0.0.1/32"), cidr("10.0.0.2/32"));
        assert_eq!(
            seen.admitted(&[b.clone(), a.clone()], start),
            [a.clone(), b.clone()],
            "sorted"
        );
        let later = start + RANGE_KEPT_FOR - Duration::from_secs(1);
        assert_eq!(
            seen.admitted(std::slice::from_ref(&a), later),
            [a.clone(), b.clone()],
            "a replica restarting keeps its address"
        );
        assert_eq!(
            seen.admitted(std::slice::from_ref(&a), start + RANGE_KEPT_FOR),
            std::slice::from_ref(&a),
            "gone for the whole time: left out"
        );
        assert_eq!(
            seen.admitted(std::slice::from_ref(&b), start + 2 * RANGE_KEPT_FOR),
            [b],
            "listed again: admitted; and the one listed last long ago left out"
        );
    }

    #[test]
    fn a_held_change_writes_the_live_spec_or_nothing() {
        let v = validated();
        let owner = owner();
        let live = stored(&network_policy(
            &v,
            &policy_settings(&["10.0.0.0/24"]),
            Some(&owner),
        ));
        let desired = network_policy(&v, &policy_settings(&["10.0.0.1/32"]), Some(&owner));
        let kept = held(&desired, Some(&live)).unwrap();
        assert_eq!(kept.spec, live.spec, "who may reach the pods stays");
        assert_eq!(kept.metadata, desired.metadata, "written as ours");
        assert!(!changes_route(&kept, Some(&live)));
        assert_eq!(
            held(&desired, None),
            None,
            "nothing written where nothing was"
        );
    }

    #[test]
    fn network_policy_without_api_server_ranges_admits_the_operator_alone() {
        let policy = network_policy(&validated(), &policy_settings(&[]), None);
        let rule = &policy.spec.unwrap().ingress.unwrap()[0];
        assert_eq!(rule.from.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn network_policy_is_built_with_the_workload_only_when_on() {
        let off = build(&validated(), &TLS, &build_settings(), None);
        assert!(off.network_policy.is_none());
        let on_settings = Settings {
            network_policy: settings(
                NetworkPolicyMode::On,
                Some(&"10.0.0.0/24".parse().unwrap()),
                "initializer-system",
            ),
            ..build_settings()
        };
        let on = build(&validated(), &TLS, &on_settings, None);
        let policy = on.network_policy.unwrap();
        assert_eq!(policy.metadata.name, on.service.metadata.name);
        assert_eq!(policy.metadata.namespace, on.service.metadata.namespace);
        assert_eq!(policy.metadata.labels, on.service.metadata.labels);
    }

    #[test]
    fn network_policy_settings_follow_the_flags() {
        let cidrs: Cidrs = "10.0.0.0/24".parse().unwrap();
        assert_eq!(settings(NetworkPolicyMode::Off, Some(&cidrs), "ns"), None);
        let on = settings(NetworkPolicyMode::On, Some(&cidrs), "ns").unwrap();
        assert_eq!(on.operator_namespace, "ns");
        assert_eq!(on.api_server_cidrs, Some(cidrs.0.clone()));
        assert!(!on.reads_ranges() && !on.withdraws());
        let auto = settings(NetworkPolicyMode::Auto, None, "ns").unwrap();
        assert!(auto.reads_ranges() && auto.withdraws());
        let given = settings(NetworkPolicyMode::Auto, Some(&cidrs), "ns").unwrap();
        assert!(
            !given.reads_ranges() && given.withdraws(),
            "given ranges are used as given"
        );
        assert_eq!(
            on.operator_pod_labels,
            initializer_packaging::manifest::selector_labels(),
            "the operator's pods are found by its Deployment's selector"
        );
        assert!(" , ".parse::<Cidrs>().is_err(), "at least one CIDR");
    }

    #[test]
    fn the_api_servers_ranges_are_its_addresses_in_the_kubernetes_endpoint_slice() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["172.18.0.3"]},
                {"addresses": ["172.18.0.2"], "conditions": {"ready": true}},
                {"addresses": ["172.18.0.3", "not an address"]},
                {"addresses": ["fd00::2"]},
            ],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }))
        .unwrap();
        assert_eq!(
            api_server_ranges(&slice)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["172.18.0.2/32", "172.18.0.3/32", "fd00::2/128"],
            "each address once, as one address"
        );
        let empty = EndpointSlice {
            endpoints: None,
            ..slice
        };
        assert!(api_server_ranges(&empty).is_empty());
    }

    #[test]
    fn a_withdrawn_policy_is_not_written_again_for_the_same_ranges_or_fewer() {
        let v = validated();
        let both = network_policy(&v, &policy_settings(&["10.0.0.2/32", "10.0.0.1/32"]), None);
        let record = withdrawal(
            &both,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            "admitted without the initializer's answer",
        );
        assert_eq!(record.api_server_cidrs, ["10.0.0.2/32", "10.0.0.1/32"]);
        assert_eq!(
            record.last_route_check,
            "admitted without the initializer's answer"
        );
        let same = network_policy(&v, &policy_settings(&["10.0.0.1/32", "10.0.0.2/32"]), None);
        assert!(is_withdrawn(&same, Some(&record)), "in another order");
        let one = network_policy(&v, &policy_settings(&["10.0.0.1/32"]), None);
        assert!(
            is_withdrawn(&one, Some(&record)),
            "fewer: it passes none of the calls the withdrawn one did not"
        );
        let another = network_policy(&v, &policy_settings(&["10.0.0.3/32"]), None);
        assert!(!is_withdrawn(&another, Some(&record)), "another range");
        let more = network_policy(
            &v,
            &policy_settings(&["10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"]),
            None,
        );
        assert!(!is_withdrawn(&more, Some(&record)), "one more range");
        assert!(!is_withdrawn(&same, None), "nothing withdrawn");
    }

    #[test]
    fn network_policy_cidrs_are_checked_when_parsed() {
        let parsed = parse_cidrs(" 10.0.0.0/24, fd00::/64 ,").unwrap();
        assert_eq!(
            parsed.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.0.0.0/24", "fd00::/64"]
        );
        assert!(parse_cidrs("").unwrap().is_empty());
        for wrong in [
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "ten/8",
            "10.0.0.0/x",
        ] {
            let err = parse_cidrs(wrong).unwrap_err();
            assert!(err.contains("is not a CIDR"), "{wrong}: {err}");
        }
    }
}
