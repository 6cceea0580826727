//! The report written for a person: the assumptions, then per Initializer and object what
//! happens, with the change as a unified diff of the YAML, as `kubectl diff` prints one.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Check, ObjectDiff, Outcome, Report};

/// The object as YAML, as `kubectl get -o yaml` writes it (keys in order).
pub fn yaml(object: &Value) -> String {
    initializer_crds::yaml::to_string(object)
        .unwrap_or_else(|e| format!("# failed to write YAML: {e}\n"))
}

/// A unified diff (three lines of context) from `before` to `after` under the header
/// `--- old` / `+++ new`; empty when they are the same.
pub fn unified(before: &str, after: &str, old: &str, new: &str) -> String {
    if before == after {
        return String::new();
    }
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(old, new)
        .to_string()
}

fn show_labels(labels: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

fn reasons(out: &mut String, reasons: &[Check]) {
    for r in reasons {
        out.push_str(&format!("  {}: {}\n", r.check, r.detail));
    }
}

/// The report as text.
pub fn text(report: &Report) -> String {
    let assumed = &report.assumed;
    let mut out = format!(
        "assumed: the operator runs in namespace {}{}\n",
        assumed.operator_namespace,
        if assumed.operator_namespace_given {
            ""
        } else {
            " (--operator-namespace to change)"
        }
    );
    for (namespace, labels) in &assumed.namespace_labels {
        out.push_str(&format!(
            "assumed: namespace {namespace} has the labels {} (--namespace-labels to add)\n",
            show_labels(labels)
        ));
    }
    for initializer in &report.initializers {
        out.push_str(&format!(
            "\nInitializer {}, computed by: {}\n",
            initializer.initializer,
            initializer.engines.join("; ")
        ));
        for note in &initializer.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        for object in &initializer.objects {
            out.push('\n');
            out.push_str(&object_text(object, &initializer.initializer));
        }
    }
    out
}

fn object_text(o: &ObjectDiff, initializer: &str) -> String {
    let mut out = String::new();
    match o.outcome {
        Outcome::Changed => {
            out.push_str(&format!("{}: changed\n", o.object));
            out.push_str(&o.diff);
        }
        Outcome::Unchanged => {
            out.push_str(&format!("{}: unchanged\n", o.object));
            reasons(&mut out, &o.reasons);
        }
        Outcome::NotMatched => {
            out.push_str(&format!("{}: not matched\n", o.object));
            reasons(&mut out, &o.reasons);
        }
        Outcome::Unknown => {
            out.push_str(&format!(
                "{}: matched; the change cannot be known offline\n",
                o.object
            ));
            reasons(&mut out, &o.reasons);
        }
        Outcome::Disagree => {
            out.push_str(&format!(
                "{}: THE ENGINES DISAGREE (a bug: please report it with this output)\n",
                o.object
            ));
            let before = yaml(&o.before);
            let engines = [("webhook", Some(&o.webhook)), ("policy", o.policy.as_ref())];
            for (engine, result) in engines {
                let Some(result) = result else { continue };
                out.push_str(&format!("  {engine}:\n"));
                reasons(&mut out, &result.reasons);
                let diff = result.after.as_ref().map(|after| {
                    unified(
                        &before,
                        &yaml(after),
                        &o.object,
                        &format!("{} (after Initializer {initializer}, {engine})", o.object),
                    )
                });
                match diff {
                    Some(diff) if diff.is_empty() => out.push_str("  (leaves it unchanged)\n"),
                    Some(diff) => out.push_str(&diff),
                    None => out.push_str("  (unknown)\n"),
                }
            }
        }
    }
    out
}
