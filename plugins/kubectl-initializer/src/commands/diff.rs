//! `kubectl initializer diff`: read the files, tell the Initializers from the objects, hand
//! them to the pure [`crate::diff`], print. Offline: no kubeconfig is read and no client made.

use std::path::Path;

use initializer_crds::Initializer;
use initializer_crds::constants::{GROUP, KIND};
use serde_json::Value;

use crate::cli::DiffArgs;
use crate::diff::{self, Assumptions, Outcome};
use crate::error::{Error, Result};
use crate::object;
use crate::output::{Format, structured};

/// Whether a manifest object is an Initializer (of any version of the group).
fn is_initializer(object: &Value) -> bool {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    object.get("kind").and_then(Value::as_str) == Some(KIND)
        && object::group_version(api_version).0 == GROUP
}

fn read(path: &Path, stdin_read: &mut bool) -> Result<(String, String)> {
    let source = path.display().to_string();
    let text = if source == "-" {
        if std::mem::replace(stdin_read, true) {
            return Err(Error::BadInput("- (stdin) is given twice".to_string()));
        }
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Error::BadInput(format!("{source}: {e}")))?;
    Ok((text, source))
}

/// Runs `diff`; returns what to print, or an error carrying it (engines that disagree, a change
/// that cannot be known offline).
pub(super) async fn run(
    args: &DiffArgs,
    namespace: Option<&str>,
    operator_namespace: Option<&str>,
    format: Format,
) -> Result<String> {
    let mut initializers = Vec::new();
    let mut objects = Vec::new();
    let mut stdin_read = false;
    for path in args.paths() {
        let (text, source) = read(path, &mut stdin_read)?;
        for item in object::parse_objects(&text, &source)? {
            if is_initializer(&item) {
                let initializer: Initializer = serde_json::from_value(item).map_err(|e| {
                    Error::BadInput(format!("{source}: an Initializer that is not valid: {e}"))
                })?;
                initializers.push(initializer);
            } else {
                objects.push(item);
            }
        }
    }
    if initializers.is_empty() {
        return Err(Error::BadInput(
            "no Initializer (apiVersion initializer.dev/v1alpha1) in the files: give its manifest \
             with -f too"
                .to_string(),
        ));
    }
    if objects.is_empty() {
        return Err(Error::BadInput(
            "no object to diff in the files besides the Initializer".to_string(),
        ));
    }
    let assumptions = Assumptions {
        operator_namespace: operator_namespace
            .unwrap_or(diff::DEFAULT_OPERATOR_NAMESPACE)
            .to_string(),
        operator_namespace_given: operator_namespace.is_some(),
        default_namespace: namespace.unwrap_or("default").to_string(),
        namespace_labels: args.namespace_labels.iter().cloned().collect(),
    };
    let prepared = initializers
        .iter()
        .map(|i| diff::prepare(i, &assumptions))
        .collect::<Result<Vec<_>, String>>()
        .map_err(Error::BadInput)?;
    let report = diff::diff_all(&prepared, &objects, &assumptions)
        .await
        .map_err(Error::BadInput)?;
    let out = match structured(format, &report)? {
        Some(out) => out,
        None => diff::text(&report),
    };
    let disagree = report.count(Outcome::Disagree);
    let unknown = report.count(Outcome::Unknown);
    if disagree > 0 {
        Err(Error::EnginesDisagree {
            count: disagree,
            report: out,
        })
    } else if unknown > 0 {
        Err(Error::Unknowable {
            count: unknown,
            report: out,
        })
    } else {
        Ok(out)
    }
}
