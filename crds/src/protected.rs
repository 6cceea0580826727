//! The resources no initializer may intercept, as one table ([`PROTECTED`]) from which both the
//! operator's validator ([`protected_reached`]) and the CRD's CEL rule ([`protected_rule`]) are
//! built, so that the two cannot disagree.

/// An API group with resources an initializer must never intercept: intercepting them could
/// lock the cluster out of its own admission configuration, authorization, API surface, leader
/// election, nodes, auditing or authentication, or let an initializer change Initializers.
///
/// [`PROTECTED`] is the one table both the operator's validator ([`protected_reached`]) and the
/// CRD's CEL rule ([`protected_rule`]) are built from, so that they cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtectedGroup {
    /// The API group; `""` is the core group.
    pub group: &'static str,
    /// True when every resource of the group is protected, whatever its name: a rule naming the
    /// group is refused whatever resources it names.
    pub whole: bool,
    /// The protected resources, so that a rule for every group (`"*"`) naming one of them is
    /// refused too: `name` protects the resource and all its subresources, `name/sub` that
    /// subresource only.
    pub resources: &'static [&'static str],
}

/// Every protected resource, by API group. Each entry says what a webhook with
/// `failurePolicy: Fail` on it would wedge while its initializer is down.
pub const PROTECTED: &[ProtectedGroup] = &[
    ProtectedGroup {
        group: "",
        whole: false,
        resources: &[
            // Events: every component reports through them, the operator's own included.
            "events",
            // Nodes: kubelets register and renew their objects.
            "nodes",
            // Service account tokens: every pod's credentials.
            "serviceaccounts/token",
            // The namespace controller's last step: namespaces could never finish deleting.
            "namespaces/finalize",
            // The scheduler's binding of pods to nodes: nothing new would start.
            "pods/binding",
            // Persistent volumes: provisioners and the binder would stall every claim.
            "persistentvolumes",
        ],
    },
    ProtectedGroup {
        group: "storage.k8s.io",
        whole: false,
        resources: &[
            // Attach and detach of volumes by the controller manager.
            "volumeattachments",
            // The kubelet's record of its CSI drivers.
            "csinodes",
        ],
    },
    ProtectedGroup {
        group: "networking.k8s.io",
        whole: false,
        resources: &[
            // Service IP allocation: no Service could be created.
            "ipaddresses",
            // The ranges Service IPs come from.
            "servicecidrs",
        ],
    },
    ProtectedGroup {
        // The API server's own storage-version bookkeeping.
        group: "internal.apiserver.k8s.io",
        whole: true,
        resources: &["storageversions"],
    },
    ProtectedGroup {
        // Dynamic resource allocation: claims and slices the scheduler and drivers write.
        group: "resource.k8s.io",
        whole: true,
        resources: &[
            "resourceclaims",
            "resourceclaimtemplates",
            "resourceslices",
            "deviceclasses",
        ],
    },
    ProtectedGroup {
        group: "admissionregistration.k8s.io",
        whole: true,
        resources: &[
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
        ],
    },
    ProtectedGroup {
        group: "rbac.authorization.k8s.io",
        whole: true,
        resources: &[
            "roles",
            "rolebindings",
            "clusterroles",
            "clusterrolebindings",
        ],
    },
    ProtectedGroup {
        group: "apiextensions.k8s.io",
        whole: true,
        resources: &["customresourcedefinitions"],
    },
    ProtectedGroup {
        group: "apiregistration.k8s.io",
        whole: true,
        resources: &["apiservices"],
    },
    ProtectedGroup {
        group: "flowcontrol.apiserver.k8s.io",
        whole: true,
        resources: &["flowschemas", "prioritylevelconfigurations"],
    },
    ProtectedGroup {
        group: "certificates.k8s.io",
        whole: true,
        resources: &["certificatesigningrequests", "clustertrustbundles"],
    },
    ProtectedGroup {
        group: "coordination.k8s.io",
        whole: true,
        resources: &["leases", "leasecandidates"],
    },
    ProtectedGroup {
        group: "events.k8s.io",
        whole: true,
        resources: &["events"],
    },
    ProtectedGroup {
        group: "authentication.k8s.io",
        whole: true,
        resources: &["tokenreviews", "selfsubjectreviews"],
    },
    ProtectedGroup {
        group: "authorization.k8s.io",
        whole: true,
        resources: &[
            "subjectaccessreviews",
            "selfsubjectaccessreviews",
            "localsubjectaccessreviews",
            "selfsubjectrulesreviews",
        ],
    },
    ProtectedGroup {
        group: crate::constants::GROUP,
        whole: true,
        resources: &[crate::constants::PLURAL],
    },
];

/// What the protected resources are, for messages.
pub const PROTECTED_SUMMARY: &str = "admission registration (webhooks, policies and bindings), RBAC, CustomResourceDefinitions, APIServices, flow control, certificate signing requests, nodes, leases, events, token and access reviews, serviceaccounts/token, namespaces/finalize, pods/binding, persistent volumes, volume attachments, CSI nodes, Service IP addresses and CIDRs, storage versions, dynamic resource allocation, or Initializers";

/// A CEL list literal of strings: `['a', 'b']`.
fn cel_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The protected resources that an admission rule for `api_groups` reaches through its resource
/// entry `resource` (`name`, `name/sub`, `*`, `*/sub`, `name/*` or `*/*`), matched the way the API
/// server matches webhook rules: `*` is every resource but no subresource, `*/x` subresource `x`
/// of every resource, `name/*` the resource and every subresource. A `*/x` entry is taken to reach
/// every subresource-protected resource, since the table does not list which subresources exist.
/// Returns `group/resource` descriptions; empty when nothing protected is reached.
pub fn protected_reached(api_groups: &[String], resource: &str) -> Vec<String> {
    let (res, sub) = match resource.split_once('/') {
        Some((res, sub)) => (res, Some(sub)),
        None => (resource, None),
    };
    let every_resource = res == "*";
    let every_group = api_groups.iter().any(|g| g == "*");
    let mut reached = Vec::new();
    for protected in PROTECTED {
        let named = api_groups.iter().any(|g| g == protected.group);
        if !named && !every_group {
            continue;
        }
        let shown = if protected.group.is_empty() {
            "core"
        } else {
            protected.group
        };
        if protected.whole && (named || every_resource) {
            reached.push(format!("{shown}/*"));
            continue;
        }
        for entry in protected.resources {
            let hit = match entry.split_once('/') {
                None => every_resource || res == *entry,
                Some((entry_res, entry_sub)) => {
                    (every_resource || res == entry_res)
                        && (sub == Some("*") || sub == Some(entry_sub))
                }
            };
            if hit {
                reached.push(format!("{shown}/{entry}"));
            }
        }
    }
    reached
}

/// The CEL rule on an [`InterceptRule`](crate::InterceptRule) refusing every resource [`protected_reached`] reaches,
/// generated from [`PROTECTED`].
pub fn protected_rule() -> kube::core::Rule {
    let clauses: Vec<String> = PROTECTED
        .iter()
        .map(|protected| {
            let group = format!("'{}' in self.apiGroups", protected.group);
            let (plain, with_sub): (Vec<&str>, Vec<&str>) =
                protected.resources.iter().partition(|e| !e.contains('/'));
            let mut matches = Vec::new();
            if protected.whole || !plain.is_empty() {
                matches.push("r == '*' || r.startsWith('*/')".to_string());
            }
            if !plain.is_empty() {
                matches.push(format!("r in {}", cel_list(plain.iter().copied())));
                matches.extend(plain.iter().map(|e| format!("r.startsWith('{e}/')")));
            }
            for entry in with_sub {
                if let Some((res, sub)) = entry.split_once('/') {
                    let forms = [
                        "*/*".to_string(),
                        format!("*/{sub}"),
                        format!("{res}/*"),
                        entry.to_string(),
                    ];
                    matches.push(format!(
                        "r in {}",
                        cel_list(forms.iter().map(String::as_str))
                    ));
                }
            }
            let by_resource = format!(
                "(('*' in self.apiGroups || {group}) && self.resources.exists(r, {}))",
                matches.join(" || ")
            );
            if protected.whole {
                format!("{group} || {by_resource}")
            } else {
                by_resource
            }
        })
        .collect();
    kube::core::Rule::new(format!("!({})", clauses.join(" || "))).message(
        kube::core::Message::Message(format!("rules must not intercept {PROTECTED_SUMMARY}")),
    )
}
