//! The verdicts written for a person (`-o json` serializes them as they are).

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
    }
    out
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
    }
}
