//! Small readers of the JSON that stored objects are kept as, shared by the modules that walk
//! them. Stored objects were validated on the way in, so where one of these readers meets a
//! missing or mistyped field it reads it as empty rather than failing a request over it.

use serde_json::Value;

/// The elements of `value` if it is an array; none otherwise (also when it is absent).
pub(crate) fn elements(value: Option<&Value>) -> std::slice::Iter<'_, Value> {
    value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
}

/// The string elements of `value` if it is an array, in order; other elements are skipped.
pub(crate) fn strings(value: Option<&Value>) -> Vec<String> {
    elements(value)
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn absent_and_non_array_values_read_as_empty() {
        assert_eq!(elements(None).count(), 0);
        assert_eq!(elements(Some(&json!({"a": 1}))).count(), 0);
        assert_eq!(strings(Some(&json!("a"))), Vec::<String>::new());
    }

    #[test]
    fn strings_skip_elements_that_are_not_strings() {
        assert_eq!(strings(Some(&json!(["a", 1, "b", null]))), ["a", "b"]);
    }
}
