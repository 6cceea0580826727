//! The verdicts written for a person (`-o json` serializes them as they are).

use super::policy::PolicyExplanation;
use super::{Basis, Verdict};

/// The verdicts for one object as text: one paragraph per Initializer.
pub fn text(object: &str, operation: &str, resource: &str, verdicts: &[Verdict]) -> String {
    let mut out = format!("{object} ({operation} {resource}):\n");
    if verdicts.is_empty() {
        out.push_str("  no Initializers in the cluster: nothing intercepts it\n");
        return out;
    }
    for v in verdicts {
        let basis = match &v.basis {
            Basis::Live(name) => format!("live MutatingWebhookConfiguration {name}"),
            Basis::WouldRegister(name) => {
                format!("not registered; evaluated against the {name} the operator would register")
            }
            Basis::Unknown(why) => format!("not registered; {why}"),
        };
        let headline = if v.intercepted {
            "INTERCEPTED".to_string()
        } else {
            match v.once_registered {
                Some(true) => "NOT INTERCEPTED now; would be once registered again".to_string(),
                Some(false) | None => "NOT INTERCEPTED".to_string(),
            }
        };
        out.push_str(&format!("  {}: {headline} [{basis}]\n", v.initializer));
        for reason in &v.reasons {
            out.push_str(&format!(
                "    {}: {}\n",
                reason.kind.as_str(),
                reason.detail
            ));
        }
        for note in &v.notes {
            out.push_str(&format!("    note: {note}\n"));
        }
        if let Some(policy) = &v.policy {
            out.push_str(&policy_text(policy));
        }
    }
    out
}

/// The compiled policy's lines under an Initializer's verdict: its headline, then every
/// constraint that fails and every false `matchCondition`.
fn policy_text(policy: &PolicyExplanation) -> String {
    match policy {
        PolicyExplanation::Compiled(v) => {
            let headline = if v.mutates {
                "WOULD MUTATE: its constraints match and every matchCondition is true"
            } else {
                "WOULD NOT MUTATE"
            };
            let mut out = format!(
                "    compiled policy {} (MutatingAdmissionPolicy from spec.preset): {headline}\n",
                v.policy
            );
            for reason in &v.constraints {
                out.push_str(&format!(
                    "      matchConstraints {}: {}\n",
                    reason.kind.as_str(),
                    reason.detail
                ));
            }
            for c in v.conditions.iter().filter(|c| !c.holds) {
                out.push_str(&format!(
                    "      matchCondition {} is false: {}\n",
                    c.name, c.detail
                ));
            }
            for note in &v.notes {
                out.push_str(&format!("      note: {note}\n"));
            }
            out
        }
        PolicyExplanation::NotCompiled { reason, .. } => {
            format!("    compiled policy: none, the preset keeps the webhook: {reason}\n")
        }
        PolicyExplanation::Unknown(why) => {
            format!("    compiled policy: not judged: {why}\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::why::tests::{deployment, judge, sidecar};
    use serde_json::json;

    #[test]
    fn text_names_each_initializer_its_verdict_and_every_reason() {
        let init = sidecar();
        let request = deployment("shop", json!({"tier": "front"}), json!({}));
        let v = judge(&init, &request);
        let out = text(
            &request.object_shown(),
            "CREATE",
            &request.resource_shown(),
            &[v],
        );
        assert!(
            out.starts_with("Deployment/shop/nginx (CREATE apps/v1 deployments):"),
            "{out}"
        );
        assert!(
            out.contains(
                "sidecar: NOT INTERCEPTED [live MutatingWebhookConfiguration initializer-sidecar]"
            ),
            "{out}"
        );
        assert!(out.contains("    AnnotationGate: "), "{out}");
        let empty = text("Pod/a/b", "CREATE", "v1 pods", &[]);
        assert!(empty.contains("no Initializers"), "{empty}");
        assert!(
            !out.contains("compiled policy"),
            "no preset, no policy: {out}"
        );
    }

    #[test]
    fn a_preset_shows_its_compiled_policy_and_each_false_condition() {
        use crate::why::policy::{ConditionResult, PolicyVerdict};
        let init = sidecar();
        let request = deployment("shop", json!({"tier": "front"}), json!({}));
        let mut v = judge(&init, &request);
        v.policy = Some(PolicyExplanation::Compiled(PolicyVerdict {
            policy: "initializer-sidecar-preset".into(),
            mutates: false,
            constraints: Vec::new(),
            conditions: vec![
                ConditionResult {
                    name: "preset-kinds".into(),
                    holds: true,
                    detail: "fine".into(),
                },
                ConditionResult {
                    name: "preset-labels".into(),
                    holds: false,
                    detail: "spec.preset.selector.labels requires app=web".into(),
                },
            ],
            notes: Vec::new(),
        }));
        let out = text(
            "Deployment/shop/nginx",
            "CREATE",
            "apps/v1 deployments",
            &[v.clone()],
        );
        assert!(
            out.contains("    compiled policy initializer-sidecar-preset (MutatingAdmissionPolicy from spec.preset): WOULD NOT MUTATE\n"),
            "{out}"
        );
        assert!(
            out.contains("      matchCondition preset-labels is false: spec.preset.selector.labels requires app=web\n"),
            "{out}"
        );
        assert!(
            !out.contains("preset-kinds"),
            "true conditions are not listed: {out}"
        );
        v.policy = Some(PolicyExplanation::NotCompiled {
            field: "spec.image".into(),
            reason: "spec.image: custom".into(),
        });
        let out = text(
            "Deployment/shop/nginx",
            "CREATE",
            "apps/v1 deployments",
            &[v],
        );
        assert!(
            out.contains("compiled policy: none, the preset keeps the webhook: spec.image: custom"),
            "{out}"
        );
    }
}
