//! The JSON patch between two serializations of the same typed object, computed on the JSON
//! text. A handler changes a few fields of a large object, so most subtrees of the two texts are
//! identical: those are compared as text and skipped without being parsed, and only the parts
//! that differ become `serde_json::Value`s. The operations are the ones `json_patch::diff`
//! yields for the parsed documents (the same walk over objects, in key order, and arrays), at a
//! fraction of the cost: no value tree of the whole object is built, dropped or walked.

use std::cmp::Ordering;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The patch that turns the document `before` into the document `after`.
pub(crate) fn diff_text(before: &str, after: &str) -> Result<Patch, serde_json::Error> {
    let mut ops = Vec::new();
    // The texts are walked as they are: each level is validated as it is split into members.
    diff_raw(before, after, &mut PointerBuf::new(), &mut ops)?;
    Ok(Patch(ops))
}

/// The members of a JSON object as text, in document order. Fails on a key that holds an escape
/// sequence (it cannot be borrowed from the text); the caller then compares parsed values.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(member) = map.next_entry::<&'de str, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

fn first_byte(text: &str) -> Option<u8> {
    text.bytes().find(|b| !b.is_ascii_whitespace())
}

fn diff_raw(
    l: &str,
    r: &str,
    path: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) -> Result<(), serde_json::Error> {
    // Identical text is an identical value: the common case, and the cheap one.
    if l == r {
        return Ok(());
    }
    match (first_byte(l), first_byte(r)) {
        (Some(b'{'), Some(b'{')) => {
            match (
                serde_json::from_str::<Members>(l),
                serde_json::from_str::<Members>(r),
            ) {
                (Ok(Members(mut lm)), Ok(Members(mut rm))) => {
                    // json_patch walks serde_json's sorted maps: the same key order here.
                    lm.sort_unstable_by_key(|(k, _)| *k);
                    rm.sort_unstable_by_key(|(k, _)| *k);
                    diff_members(&lm, &rm, path, ops)
                }
                _ => {
                    let (lv, rv): (Value, Value) =
                        (serde_json::from_str(l)?, serde_json::from_str(r)?);
                    diff_values(&lv, &rv, path, ops);
                    Ok(())
                }
            }
        }
        (Some(b'['), Some(b'[')) => {
            let le: Vec<&RawValue> = serde_json::from_str(l)?;
            let re: Vec<&RawValue> = serde_json::from_str(r)?;
            let mut shift = 0usize;
            for idx in 0..le.len().max(re.len()) {
                path.push_back(idx - shift);
                match (le.get(idx), re.get(idx)) {
                    (Some(a), Some(b)) => diff_raw(a.get(), b.get(), path, ops)?,
                    (Some(_), None) => {
                        shift += 1;
                        ops.push(remove(path));
                    }
                    (None, Some(b)) => ops.push(add(path, serde_json::from_str(b.get())?)),
                    (None, None) => {}
                }
                path.pop_back();
            }
            Ok(())
        }
        _ => {
            let (lv, rv): (Value, Value) = (serde_json::from_str(l)?, serde_json::from_str(r)?);
            if lv != rv {
                ops.push(replace(path, rv));
            }
            Ok(())
        }
    }
}

fn diff_members(
    left: &[(&str, &RawValue)],
    right: &[(&str, &RawValue)],
    path: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) -> Result<(), serde_json::Error> {
    // Added and changed members in key order, then removed ones, as json_patch does.
    let (mut i, mut j) = (0, 0);
    let mut removed = Vec::new();
    while j < right.len() {
        let (rk, rv) = right[j];
        match left.get(i).map(|(lk, _)| (*lk).cmp(rk)) {
            Some(Ordering::Less) => {
                removed.push(left[i].0);
                i += 1;
            }
            Some(Ordering::Equal) => {
                path.push_back(rk);
                diff_raw(left[i].1.get(), rv.get(), path, ops)?;
                path.pop_back();
                i += 1;
                j += 1;
            }
            Some(Ordering::Greater) | None => {
                path.push_back(rk);
                ops.push(add(path, serde_json::from_str(rv.get())?));
                path.pop_back();
                j += 1;
            }
        }
    }
    removed.extend(left[i..].iter().map(|(k, _)| *k));
    for key in removed {
        path.push_back(key);
        ops.push(remove(path));
        path.pop_back();
    }
    Ok(())
}

/// `json_patch::diff`'s walk, for the rare subtree whose keys hold escape sequences.
fn diff_values(left: &Value, right: &Value, path: &mut PointerBuf, ops: &mut Vec<PatchOperation>) {
    match (left, right) {
        (Value::Object(lm), Value::Object(rm)) => {
            for (key, rv) in rm {
                path.push_back(key);
                match lm.get(key) {
                    Some(lv) => diff_values(lv, rv, path, ops),
                    None => ops.push(add(path, rv.clone())),
                }
                path.pop_back();
            }
            for key in lm.keys().filter(|k| !rm.contains_key(*k)) {
                path.push_back(key);
                ops.push(remove(path));
                path.pop_back();
            }
        }
        (Value::Array(la), Value::Array(ra)) => {
            let mut shift = 0usize;
            for idx in 0..la.len().max(ra.len()) {
                path.push_back(idx - shift);
                match (la.get(idx), ra.get(idx)) {
                    (Some(a), Some(b)) => diff_values(a, b, path, ops),
                    (Some(_), None) => {
                        shift += 1;
                        ops.push(remove(path));
                    }
                    (None, Some(b)) => ops.push(add(path, b.clone())),
                    (None, None) => {}
                }
                path.pop_back();
            }
        }
        _ if left == right => {}
        _ => ops.push(replace(path, right.clone())),
    }
}

fn add(path: &PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: path.clone(),
        value,
    })
}

fn remove(path: &PointerBuf) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation { path: path.clone() })
}

fn replace(path: &PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Replace(ReplaceOperation {
        path: path.clone(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The text diff must agree with json_patch's diff of the parsed documents, and the patch
    /// must turn `before` into `after`.
    fn agrees(before: Value, after: Value) {
        let (b, a) = (before.to_string(), after.to_string());
        let ours = diff_text(&b, &a).unwrap();
        assert_eq!(ours, json_patch::diff(&before, &after), "{b} -> {a}");
        let mut doc = before.clone();
        json_patch::patch(&mut doc, &ours).unwrap();
        assert_eq!(doc, after);
    }

    #[test]
    fn identical_documents_need_no_patch() {
        agrees(json!({"a": 1, "b": [1, 2]}), json!({"a": 1, "b": [1, 2]}));
        assert!(diff_text("{}", "{}").unwrap().0.is_empty());
    }

    #[test]
    fn members_are_added_replaced_and_removed_in_key_order() {
        agrees(
            json!({"metadata": {"name": "p", "labels": {"app": "nginx"}}, "z": 1, "b": true}),
            json!({"metadata": {"name": "p", "labels": {"app": "nginx", "admission": "x"},
                "annotations": {"initializer.dev/initialized-by": "preset"}}, "b": false, "a": null}),
        );
    }

    #[test]
    fn arrays_grow_shrink_and_change_element_by_element() {
        agrees(
            json!({"containers": [{"name": "nginx"}]}),
            json!({"containers": [{"name": "nginx"}, {"name": "sidecar", "image": "x"}]}),
        );
        agrees(json!([1, 2, 3, 4]), json!([1, 5]));
        agrees(json!([[1], {"a": [2]}]), json!([[1, 2], {"a": []}]));
    }

    #[test]
    fn kinds_of_values_may_change() {
        agrees(json!({"a": {"b": 1}}), json!({"a": [1]}));
        agrees(json!({"a": "s"}), json!({"a": {"s": 1}}));
        agrees(json!([1]), json!({"0": 1}));
        agrees(json!(1), json!(2));
    }

    #[test]
    fn equal_values_written_differently_need_no_patch() {
        assert!(
            diff_text(r#"{"a":1.0}"#, r#"{"a": 1.0 }"#)
                .unwrap()
                .0
                .is_empty()
        );
        assert!(
            diff_text(r#"{"a":"x"}"#, r#"{"a":"\u0078"}"#)
                .unwrap()
                .0
                .is_empty()
        );
    }

    #[test]
    fn keys_with_escapes_and_pointer_characters_are_handled() {
        agrees(
            json!({"annotations": {"a/b~c": "1", "q\"uote": "x", "n\nl": "y"}}),
            json!({"annotations": {"a/b~c": "2", "q\"uote": "x", "tab\t": "z"}}),
        );
    }

    #[test]
    fn text_that_is_not_json_is_an_error() {
        assert!(diff_text("{", "{}").is_err());
        assert!(diff_text(r#"{"a":1}"#, r#"{"a":}"#).is_err());
    }
}
