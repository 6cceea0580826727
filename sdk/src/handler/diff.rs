//! The JSON patch between two serializations of the same typed object, computed on the JSON
//! text. A handler changes a few fields of a large object, so the two texts share most of their
//! bytes: a long common prefix and a long common suffix. A byte scan of the prefix (cheaper than
//! any parse: it only follows strings and brackets) finds the innermost container that encloses
//! every difference, and only that container is walked. Within it, subtrees whose texts are
//! identical are skipped without being parsed, and only the parts that differ become
//! `serde_json::Value`s. The operations are the ones `json_patch::diff` yields for the parsed
//! documents (the same walk over objects, in key order, and arrays), at a fraction of the cost:
//! no value tree of the whole object is built, dropped or walked.
//!
//! Justified by: sdk/README.md, "The biggest costs found", row "the JSON patch: diffing the two
//! serializations" (7.4 % → 3.1–3.3 % of the preset server's CPU at saturation).

use std::cmp::Ordering;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The patch that turns the document `before` into the document `after`.
pub(crate) fn diff_text(before: &str, after: &str) -> Result<Patch, serde_json::Error> {
    if before == after {
        return Ok(Patch(Vec::new()));
    }
    if let Some(mut narrowed) = narrow(before, after) {
        let mut ops = Vec::new();
        let (l, r) = (
            &before[narrowed.start..narrowed.before_end],
            &after[narrowed.start..narrowed.after_end],
        );
        if diff_raw(l, r, &mut narrowed.path, &mut ops).is_ok() {
            return Ok(Patch(ops));
        }
        // Invalid text inside the container: the whole walk reports it as it always has (with
        // its position in the whole text).
    }
    let mut ops = Vec::new();
    // The texts are walked as they are: each level is validated as it is split into members.
    diff_raw(before, after, &mut PointerBuf::new(), &mut ops)?;
    Ok(Patch(ops))
}

/// The innermost container that encloses every difference between two texts: it starts at the
/// same offset in both, and what follows its end is the same in both.
#[derive(Debug)]
struct Narrowed {
    start: usize,
    before_end: usize,
    after_end: usize,
    /// Where the container sits in the document.
    path: PointerBuf,
}

/// Deeper containers than this are not tracked: the whole documents are walked instead.
const MAX_DEPTH: usize = 32;

/// A container open at the end of the common prefix.
#[derive(Clone, Copy, Default)]
struct Frame {
    /// The offset of its `{` or `[`.
    start: usize,
    object: bool,
    /// An object's next string is a key (after `{` and `,`).
    expect_key: bool,
    /// The member open in it: an object's key (the bytes between its quotes, escapes included)
    /// or an array's index (in `member.0`).
    member: (usize, usize),
}

/// The innermost container of `before` and `after` that holds every difference between them,
/// other than the whole document, found by scanning bytes (no parse). `None` sends the caller
/// to the whole-document walk: no such container, or text the scan does not understand (the
/// walk then reports invalid JSON as it always has).
fn narrow(before: &str, after: &str) -> Option<Narrowed> {
    let (l, r) = (before.as_bytes(), after.as_bytes());
    let p = common_prefix(l, r);
    // The tails compared below start after `p` in both texts, so a suffix that overlaps the
    // prefix would never be needed.
    let s = common_suffix(&l[p..], &r[p..]);

    // The bytes before `p` are the same in both texts, and so are the containers open at `p`.
    let mut stack = [Frame::default(); MAX_DEPTH];
    let mut depth = 0usize;
    let mut i = 0;
    // At `p`: inside a string, and right after its backslash.
    let mut open_string = None;
    let mut documents = 0;
    while i < p {
        match l[i] {
            b'"' => match string_end(l, i + 1, p) {
                Ok(end) => {
                    if let Some(top) = depth.checked_sub(1).map(|d| &mut stack[d])
                        && top.object
                        && top.expect_key
                    {
                        top.member = (i + 1, end - 1);
                        top.expect_key = false;
                    }
                    i = end;
                    continue;
                }
                Err(escaped) => {
                    open_string = Some(escaped);
                    break;
                }
            },
            open @ (b'{' | b'[') => {
                if depth == MAX_DEPTH {
                    return None;
                }
                if depth == 0 {
                    documents += 1;
                    if documents > 1 {
                        return None;
                    }
                } else if stack[depth - 1].object && stack[depth - 1].expect_key {
                    return None;
                }
                stack[depth] = Frame {
                    start: i,
                    object: open == b'{',
                    expect_key: open == b'{',
                    member: (0, 0),
                };
                depth += 1;
            }
            close @ (b'}' | b']') => {
                let top = depth.checked_sub(1)?;
                if stack[top].object != (close == b'}') {
                    return None;
                }
                depth = top;
            }
            b',' => {
                let top = &mut stack[depth.checked_sub(1)?];
                if top.object {
                    top.expect_key = true;
                } else {
                    top.member.0 += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }

    // From the innermost open container outwards: the first whose tails are equal.
    let (mut before_end, mut after_end) = match open_string {
        None => (p, p),
        Some(escaped) => {
            // Finish the string both texts are in at `p` (the escaped byte is skipped).
            let from = p + usize::from(escaped);
            (
                string_end(l, from.min(l.len()), l.len()).ok()?,
                string_end(r, from.min(r.len()), r.len()).ok()?,
            )
        }
    };
    for level in (0..depth).rev() {
        before_end = container_end(l, before_end)?;
        after_end = container_end(r, after_end)?;
        let close = if stack[level].object { b'}' } else { b']' };
        if l[before_end - 1] != close || r[after_end - 1] != close {
            return None;
        }
        let tail = l.len() - before_end;
        // Both tails start after `p`, so they are equal exactly when they fit in the suffix.
        if tail == r.len() - after_end && tail <= s {
            // The whole document is walked as it always was (that also checks the text around
            // it).
            if level == 0 {
                return None;
            }
            // The text around the container is not looked at again: both texts are
            // serde_json's serializations of a typed value, valid by construction, and scanning
            // the rest of a Pod to re-check its brackets cost a third of the narrowed diff.
            let mut path = PointerBuf::new();
            for parent in &stack[..level] {
                let (from, to) = parent.member;
                if !parent.object {
                    path.push_back(from);
                } else if l[from..to].contains(&b'\\') {
                    // Quotes and escapes are ASCII: the slice is on character boundaries.
                    path.push_back(serde_json::from_str::<String>(&before[from - 1..=to]).ok()?);
                } else {
                    path.push_back(&before[from..to]);
                }
            }
            return Some(Narrowed {
                start: stack[level].start,
                before_end,
                after_end,
                path,
            });
        }
    }
    None
}

/// The end (the offset after its closing quote) of the string whose body starts at `from`,
/// looking no further than `limit`; when it is still open there, whether `limit` falls right
/// after a backslash.
fn string_end(text: &[u8], mut from: usize, limit: usize) -> Result<usize, bool> {
    loop {
        match text[from..limit]
            .iter()
            .position(|&b| b == b'"' || b == b'\\')
        {
            None => return Err(false),
            Some(k) if text[from + k] == b'"' => return Ok(from + k + 1),
            Some(k) => {
                from += k + 2;
                if from > limit {
                    return Err(true);
                }
            }
        }
    }
}

/// The end (the offset after its closing bracket) of the container open at `from`, which is not
/// inside a string.
fn container_end(text: &[u8], mut from: usize) -> Option<usize> {
    let mut depth = 0usize;
    while let Some(k) = text[from..]
        .iter()
        .position(|&b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'))
    {
        let at = from + k;
        from = at + 1;
        match text[at] {
            b'"' => from = string_end(text, from, text.len()).ok()?,
            b'{' | b'[' => depth += 1,
            _ if depth == 0 => return Some(from),
            _ => depth -= 1,
        }
    }
    None
}

/// How many bytes the two texts share at their start.
fn common_prefix(l: &[u8], r: &[u8]) -> usize {
    // Sixteen bytes at a time: the first differing byte is the lowest set byte of the xor.
    let (lc, _) = l.as_chunks::<16>();
    let (rc, _) = r.as_chunks::<16>();
    for (chunk, (a, b)) in lc.iter().zip(rc).enumerate() {
        let x = u128::from_le_bytes(*a) ^ u128::from_le_bytes(*b);
        if x != 0 {
            return chunk * 16 + (x.trailing_zeros() / 8) as usize;
        }
    }
    let done = lc.len().min(rc.len()) * 16;
    done + l[done..]
        .iter()
        .zip(&r[done..])
        .take_while(|(a, b)| a == b)
        .count()
}

/// How many bytes the two texts share at their end.
fn common_suffix(l: &[u8], r: &[u8]) -> usize {
    let n = l.len().min(r.len());
    let (l, r) = (&l[l.len() - n..], &r[r.len() - n..]);
    // The chunks are aligned on the ends; the last byte of a chunk is the highest of the xor.
    let (_, lc) = l.as_rchunks::<16>();
    let (_, rc) = r.as_rchunks::<16>();
    for (chunk, (a, b)) in lc.iter().rev().zip(rc.iter().rev()).enumerate() {
        let x = u128::from_le_bytes(*a) ^ u128::from_le_bytes(*b);
        if x != 0 {
            return chunk * 16 + (x.leading_zeros() / 8) as usize;
        }
    }
    let done = lc.len() * 16;
    done + l[..n - done]
        .iter()
        .rev()
        .zip(r[..n - done].iter().rev())
        .take_while(|(a, b)| a == b)
        .count()
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

    /// The container the text diff narrows to, as a JSON pointer (`None`: the whole document).
    fn narrowed_to(before: &Value, after: &Value) -> Option<String> {
        narrow(&before.to_string(), &after.to_string()).map(|n| n.path.to_string())
    }

    fn pod(labels: Value, annotations: Value, image: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"annotations": annotations, "generateName": "nginx-f5f94b64-",
                "labels": labels, "namespace": "default"},
            "spec": {"containers": [{"image": image, "imagePullPolicy": "IfNotPresent",
                "name": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                "restartPolicy": "Always"},
        })
    }

    #[test]
    fn a_label_and_an_annotation_are_diffed_within_metadata() {
        let before = pod(json!({"app": "nginx"}), json!({"a": "1"}), "nginx:1.8.1");
        let after = pod(
            json!({"app": "nginx", "initialized": "true"}),
            json!({"a": "1", "initializer.dev/initialized-by": "preset"}),
            "nginx:1.8.1",
        );
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/metadata"));
        agrees(before, after);
    }

    #[test]
    fn differences_far_apart_are_diffed_from_their_common_container() {
        let before = pod(json!({"app": "nginx"}), json!({}), "nginx:1.8.1");
        let after = pod(json!({"app": "web"}), json!({}), "nginx:1.9");
        assert_eq!(narrowed_to(&before, &after), None);
        agrees(before, after);
    }

    #[test]
    fn a_change_deep_in_nested_arrays_is_diffed_there() {
        let doc = |v: &str| {
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"},
                {"name": "Y", "value": v}]}], "z": [[1, [2, [3, v]]]]}})
        };
        assert_eq!(narrowed_to(&doc("2"), &doc("3")).as_deref(), Some("/spec"));
        agrees(doc("2"), doc("3"));
        let before = json!({"a": [0, {"env": [{"name": "Y", "value": "2"}]}], "b": 1});
        let after = json!({"a": [0, {"env": [{"name": "Y", "value": "3"}]}], "b": 1});
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/a/1/env/0"));
        agrees(before, after);
        let before = json!({"a": [[1, 2], [3, [4, 5]]]});
        let after = json!({"a": [[1, 2], [3, [4, 6]]]});
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/a/1/1"));
        agrees(before, after);
    }

    #[test]
    fn keys_with_escapes_on_the_path_are_decoded() {
        let before = json!({"a\"b": {"c": 1}, "d": 0});
        let after = json!({"a\"b": {"c": 2}, "d": 0});
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/a\"b"));
        agrees(before, after);
        let before = json!({"x/y~z": {"é\\n\t": {"c": [1]}}, "d": 0});
        let after = json!({"x/y~z": {"é\\n\t": {"c": [1, 2]}}, "d": 0});
        assert_eq!(
            narrowed_to(&before, &after).as_deref(),
            Some("/x~1y~0z/é\\n\t/c")
        );
        agrees(before, after);
    }

    #[test]
    fn a_prefix_ending_inside_a_string_is_handled() {
        // Brackets and quotes inside strings are not structure.
        agrees(
            json!({"m": {"s": "x}]\"{y1", "t": 0}, "n": 1}),
            json!({"m": {"s": "x}]\"{y2", "t": 0}, "n": 1}),
        );
        // The prefix ends right after a backslash: `\n` against `\t`, `\"` against `\\`.
        agrees(
            json!({"m": {"s": "a\nb}"}, "n": 1}),
            json!({"m": {"s": "a\tb}"}, "n": 1}),
        );
        agrees(
            json!({"m": {"s": "a\"]"}, "n": 1}),
            json!({"m": {"s": "a\\]"}, "n": 1}),
        );
        // Inside a key.
        agrees(
            json!({"m": {"ab": 1}, "n": 1}),
            json!({"m": {"ac": 1}, "n": 1}),
        );
        // In the middle of a multi-byte character: é is C3 A9, è is C3 A8.
        let before = json!({"m": {"s": "é"}, "n": 1});
        let after = json!({"m": {"s": "è"}, "n": 1});
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/m"));
        agrees(before, after);
        agrees(json!({"m": ["é"]}), json!({"m": ["ê"]}));
    }

    #[test]
    fn elements_added_at_the_end_of_an_inner_array_are_diffed_there() {
        let before = json!({"m": {"a": [1, [2]], "b": 2}});
        let after = json!({"m": {"a": [1, [2, 3], {"x": 1}], "b": 2}});
        assert_eq!(narrowed_to(&before, &after).as_deref(), Some("/m/a"));
        agrees(before, after);
        agrees(json!({"m": {"a": []}}), json!({"m": {"a": [[]]}}));
    }

    #[test]
    fn a_value_may_change_kind_inside_the_narrowed_container() {
        agrees(
            json!({"m": {"a": {"b": 1}, "z": 0}, "n": 1}),
            json!({"m": {"a": [1], "z": 0}, "n": 1}),
        );
        agrees(
            json!({"m": {"a": "s", "z": 0}, "n": 1}),
            json!({"m": {"a": null, "z": 0}, "n": 1}),
        );
        agrees(
            json!({"m": {"a": []}, "n": 1}),
            json!({"m": {"a": {}}, "n": 1}),
        );
    }

    #[test]
    fn invalid_text_inside_the_narrowed_container_is_reported_as_before() {
        let (before, after) = (r#"{"a":{"b":1},"c":2}"#, r#"{"a":{"b":},"c":2}"#);
        let whole = diff_raw(before, after, &mut PointerBuf::new(), &mut Vec::new());
        assert_eq!(
            diff_text(before, after).unwrap_err().to_string(),
            whole.unwrap_err().to_string()
        );
        // Text around the narrowed container is not validated again (the SDK diffs only
        // serde_json's output), but a scan that meets a bracket it does not expect gives up.
        assert!(diff_text(r#"{"a":[1}}"#, r#"{"a":[2}}"#).is_err());
    }

    #[test]
    fn whitespace_and_deep_nesting_are_handled() {
        let before = json!({"m": {"a": [1, {"b": "x"}], "c": 0}, "n": 1});
        let after = json!({"m": {"a": [1, {"b": "y"}], "c": 0}, "n": 1});
        let (b, a) = (
            serde_json::to_string_pretty(&before).unwrap(),
            serde_json::to_string_pretty(&after).unwrap(),
        );
        assert_eq!(narrow(&b, &a).unwrap().path.to_string(), "/m/a/1");
        assert_eq!(
            diff_text(&b, &a).unwrap(),
            json_patch::diff(&before, &after)
        );
        // Deeper than the scan tracks: the whole documents are walked.
        let nest = |leaf: Value| (0..MAX_DEPTH + 8).fold(leaf, |v, _| json!({"k": [v], "z": 0}));
        let (before, after) = (nest(json!(1)), nest(json!(2)));
        assert_eq!(narrowed_to(&before, &after), None);
        agrees(before, after);
    }

    /// A small deterministic generator (xorshift64*): the randomized test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
        }

        fn string(&mut self) -> String {
            const PIECES: &[&str] = &[
                "a",
                "b",
                "app",
                "é",
                "è",
                "\"",
                "\\",
                "/",
                "~",
                "~1",
                "}",
                "]",
                "{",
                "[",
                ",",
                ":",
                "\n",
                "\u{1}",
                "😀",
                " ",
                "app.kubernetes.io/name",
            ];
            (0..self.below(4))
                .map(|_| PIECES[self.below(PIECES.len())])
                .collect()
        }

        fn value(&mut self, depth: usize) -> Value {
            // Containers near the top, so that most changes happen below the root.
            let kinds = match depth {
                0 => 0..5,
                1..4 => 0..9,
                _ => 5..9,
            };
            match kinds.start + self.below(kinds.len()) {
                0 => Value::Null,
                1 => Value::Bool(self.below(2) == 1),
                2 => json!(self.below(1000) as i64 - 500),
                3 => json!(self.below(100) as f64 / 8.0),
                4 => Value::String(self.string()),
                5..=6 => Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.string(), self.value(depth - 1)))
                        .collect(),
                ),
                _ => Value::Array((0..self.below(5)).map(|_| self.value(depth - 1)).collect()),
            }
        }

        /// Changes something at a random depth: adds, removes or replaces a member or an
        /// element, or replaces a value (possibly by one of another kind).
        fn mutate(&mut self, value: &mut Value) {
            match value {
                Value::Object(m) if !m.is_empty() && self.below(5) > 0 => {
                    let key = m.keys().nth(self.below(m.len())).cloned().unwrap();
                    self.mutate(m.get_mut(&key).unwrap());
                }
                Value::Array(a) if !a.is_empty() && self.below(5) > 0 => {
                    let idx = self.below(a.len());
                    self.mutate(&mut a[idx]);
                }
                Value::Object(m) => match self.below(3) {
                    0 => {
                        let (k, v) = (self.string(), self.value(2));
                        m.insert(k, v);
                    }
                    1 if !m.is_empty() => {
                        let key = m.keys().nth(self.below(m.len())).cloned().unwrap();
                        m.remove(&key);
                    }
                    _ => *value = self.value(2),
                },
                Value::Array(a) => match self.below(4) {
                    0 => a.push(self.value(2)),
                    1 => {
                        let (idx, v) = (self.below(a.len() + 1), self.value(2));
                        a.insert(idx, v);
                    }
                    2 if !a.is_empty() => {
                        a.remove(self.below(a.len()));
                    }
                    _ => *value = self.value(2),
                },
                _ => *value = self.value(2),
            }
        }
    }

    #[test]
    fn random_documents_and_changes_agree_with_json_patch() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut narrowed = 0;
        let runs = 600;
        for _ in 0..runs {
            let before = Value::Object(
                (0..1 + rng.below(5))
                    .map(|_| (rng.string(), rng.value(5)))
                    .collect(),
            );
            let mut after = before.clone();
            for _ in 0..1 + rng.below(2) {
                rng.mutate(&mut after);
            }
            narrowed += usize::from(narrowed_to(&before, &after).is_some());
            agrees(before, after);
        }
        // The documents must exercise the narrowing, not only the whole-document walk.
        assert!(narrowed > runs / 4, "narrowed {narrowed} of {runs}");
    }
}
