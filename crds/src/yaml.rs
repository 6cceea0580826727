//! How the project writes YAML: the committed manifests (CRD, bundle, chart, monitoring) and
//! what the tools print all come out of [`to_string`], so they share one layout.

use serde::Serialize;

/// `value` as YAML, the way every generated file is written.
///
/// serde-saphyr's defaults, except that a long one-line string stays on one line: by default
/// it folds (`>-`) the long strings that can be written plain and leaves the others (those
/// with `: `, most descriptions) as long quoted lines, a mix that reads worse than one line
/// each. Multi-line strings are still literal blocks (`|`).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! {
            folded_wrap_chars: usize::MAX,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_strings_stay_on_one_line_and_multi_line_ones_are_blocks() {
        let long = "word ".repeat(40).trim_end().to_string();
        let value = json!({ "long": long, "lines": "one\ntwo\n" });
        let text = to_string(&value).unwrap();
        assert_eq!(text, format!("lines: |\n  one\n  two\nlong: {long}\n"));
    }

    #[test]
    fn strings_other_yaml_readers_would_retype_are_quoted() {
        // OLM and kubectl read YAML 1.1: unquoted, these would be booleans, numbers or dates.
        let value = json!([
            "true",
            "yes",
            "on",
            "1.0",
            "0.1.0",
            "*",
            "2026-11-21T00:00:00Z",
            ""
        ]);
        let text = to_string(&value).unwrap();
        for line in text.lines() {
            assert!(
                line.starts_with("- \"") || line.starts_with("- '"),
                "{line}"
            );
        }
        assert_eq!(
            serde_saphyr::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
    }
}
