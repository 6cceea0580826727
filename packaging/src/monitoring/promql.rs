//! A small PromQL reader: the metric names an expression reads, so that the tests can check
//! that every alert (and dashboard panel) reads a metric the operator exports.

use std::collections::BTreeSet;

/// PromQL words that are not metric names: operators, modifiers, keywords, and the
/// aggregation operators (which may be followed by `by (...)` rather than `(`).
const PROMQL_KEYWORDS: [&str; 27] = [
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "atan2",
    "le",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// The metric names a PromQL expression reads: identifiers outside label matchers, label
/// lists, strings and range selectors that are neither function names (followed by `(`) nor
/// keywords. Grafana's `$variables` are ignored.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    // After `by`, `on`, `without`, `ignoring`, `group_left`, `group_right`, the parenthesised
    // list holds label names.
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if label_list_next => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                label_list_next = false;
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let is_call = chars.get(next) == Some(&'(');
                let lower = word.to_lowercase();
                if [
                    "by",
                    "on",
                    "without",
                    "ignoring",
                    "group_left",
                    "group_right",
                ]
                .contains(&lower.as_str())
                {
                    label_list_next = is_call;
                } else if !is_call && !PROMQL_KEYWORDS.contains(&lower.as_str()) {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number, possibly with an exponent or a duration unit.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}
