//! The CEL text of a [`Program`]: its conditions as `matchConditions`, one JSONPatch mutation
//! per kind, and the "needs injection" condition that keeps the policy from acting on an object
//! that already has everything (so a reinvocation changes nothing).
//!
//! Each function here renders exactly what the matching function of `ir` computes: the same
//! guards, the same operations, in the same order. Where the interpreter asks whether a field
//! is present, the text says `has()`; where it adds a whole list because the list is missing,
//! the text does too, since `add` to `.../-` of a missing list fails in the API server.
//!
//! Every string that reaches the text (names, values, keys, paths) goes through [`string`]:
//! printable ASCII as is, quotes and backslashes escaped, everything else as `\u`/`\U`
//! escapes, so no value can end a literal or break a line. JSON values become CEL literals
//! through [`literal`], every list element and map value wrapped in `dyn()`: Kubernetes
//! compiles CEL with homogeneous aggregate literals, and a container is a map whose values have
//! different types. A long sum of lists is written as a balanced tree, since CEL's parser
//! nests `a + b + c ...` one level per term (its recursion limit is 250).

use std::fmt::Write as _;

use serde_json::Value;

use super::ir::{
    Condition, FieldPath, Keyed, KindProgram, LabelRequirement, NamePattern, PodKind, Program,
    Step, pointer,
};

/// The largest expression the API server's CEL parser accepts, in code points (cel-go's
/// default, which Kubernetes keeps).
pub const MAX_EXPRESSION_CODE_POINTS: usize = 100_000;

/// A CEL string literal holding `s` exactly.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('\'');
    out
}

/// A CEL literal of a JSON value (lists and maps with `dyn()` elements and values).
pub fn literal(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => format!("{u}u"),
            // `{:?}` always writes a fraction or an exponent, so CEL reads a double.
            (None, None, Some(f)) => format!("{f:?}"),
            (None, None, None) => n.to_string(),
        },
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|v| format!("dyn({})", literal(v)))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: dyn({})", string(k), literal(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// `object.a.b` for a field path.
fn access(path: &[&str]) -> String {
    let mut out = String::from("object");
    for field in path {
        out.push('.');
        out.push_str(field);
    }
    out
}

/// `has(object.a) && has(object.a.b)`: the path and every field on the way are present.
fn has_chain(path: &[&str]) -> String {
    let tests: Vec<String> = (1..=path.len())
        .map(|n| format!("has({})", access(&path[..n])))
        .collect();
    all(tests)
}

fn parent<'p>(path: &'p [&'static str]) -> &'p [&'static str] {
    path.split_last().map(|(_, p)| p).unwrap_or_default()
}

/// The JSON pointer of a field path, as a CEL string.
fn path_literal(path: &[&'static str]) -> String {
    string(&pointer(path).to_string())
}

/// `a || b || ...` (`false` for none).
fn any(terms: Vec<String>) -> String {
    match terms.len() {
        0 => "false".to_owned(),
        1 => terms.into_iter().next().unwrap_or_default(),
        _ => format!("({})", terms.join(" || ")),
    }
}

/// `a && b && ...` (`true` for none; `true` terms left out).
fn all(terms: Vec<String>) -> String {
    let terms: Vec<String> = terms.into_iter().filter(|t| t != "true").collect();
    match terms.len() {
        0 => "true".to_owned(),
        1 => terms.into_iter().next().unwrap_or_default(),
        _ => format!("({})", terms.join(" && ")),
    }
}

/// The concatenation of CEL lists, as a balanced tree of `+` (`[]` for none).
fn concat(lists: &[String]) -> String {
    match lists {
        [] => "[]".to_owned(),
        [one] => one.clone(),
        _ => {
            let (left, right) = lists.split_at(lists.len() / 2);
            format!("({} + {})", concat(left), concat(right))
        }
    }
}

fn add(path: &str, value: &str) -> String {
    format!("JSONPatch{{op: 'add', path: {path}, value: {value}}}")
}

fn replace(path: &str, value: &str) -> String {
    format!("JSONPatch{{op: 'replace', path: {path}, value: {value}}}")
}

/// `element` has the item's key and does not cover the item: the element the item replaces.
fn uncovered_namesake(element: &str, key: &str, item: &Keyed) -> String {
    format!(
        "(has({element}.{key}) && {element}.{key} == {} && !{})",
        string(&item.key),
        covers(element, &item.value)
    )
}

/// Whether the value `present` (a CEL expression) covers `wanted`, as
/// `kube_initializer::mutate::covers` decides: every field of a map present and covering,
/// lists of the same size element by element, anything else equal. A field whose name is an
/// identifier is tested with `has()` (struct fields and identifier-like map keys alike);
/// any other name can only be a map key, tested with `in`. The compiler refuses the names
/// neither form can reach ([`mod@super::compile`]: CEL's keywords).
pub fn covers(present: &str, wanted: &Value) -> String {
    match wanted {
        Value::Object(fields) => all(fields
            .iter()
            .map(|(name, value)| {
                if is_identifier(name) {
                    let field = format!("{present}.{name}");
                    format!("(has({field}) && {})", covers(&field, value))
                } else {
                    let field = format!("{present}[{}]", string(name));
                    format!(
                        "({} in {present} && {})",
                        string(name),
                        covers(&field, value)
                    )
                }
            })
            .collect()),
        Value::Array(elements) => {
            let mut terms = vec![format!("size({present}) == {}", elements.len())];
            terms.extend(
                elements
                    .iter()
                    .enumerate()
                    .map(|(i, value)| covers(&format!("{present}[{i}]"), value)),
            );
            all(terms)
        }
        scalar => format!("{present} == {}", literal(scalar)),
    }
}

/// A name CEL can select as is: an identifier that is no keyword ([`crate::cel::is_keyword`]:
/// Kubernetes escapes those, `__namespace__`, for struct fields but not for map keys) and has
/// no `__` (which Kubernetes reads as the start of an escape).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.contains("__")
        && !crate::cel::is_keyword(name)
}

fn list_of(items: &[Keyed]) -> String {
    literal(&Value::Array(
        items.iter().map(|i| i.value.clone()).collect(),
    ))
}

fn map_of(entries: &[(String, String)]) -> String {
    let entries: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}: {}", string(k), string(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// `request.kind` is `kind`.
fn kind_test(kind: &PodKind) -> String {
    format!(
        "(request.kind.group == {} && request.kind.version == {} && request.kind.kind == {})",
        string(kind.group),
        string(kind.version),
        string(kind.kind)
    )
}

/// One condition's expression.
pub fn condition(condition: &Condition) -> String {
    match condition {
        Condition::Annotation { name, required, .. } => {
            let annotations = "object.metadata.annotations";
            let name = string(name);
            let present = format!("(has({annotations}) && {name} in {annotations})");
            let not_false = format!("{annotations}[{name}].trim() != 'false'");
            if *required {
                format!("({present} && {not_false})")
            } else {
                format!("(!{present} || {not_false})")
            }
        }
        Condition::Kinds(kinds) => any(kinds.iter().map(kind_test).collect()),
        Condition::Labels(requirements) => {
            let labels = "object.metadata.labels";
            let has = |key: &str| format!("(has({labels}) && {} in {labels})", string(key));
            let one_of = |key: &str, values: &[String]| {
                let values: Vec<String> = values.iter().map(|v| string(v)).collect();
                format!("{labels}[{}] in [{}]", string(key), values.join(", "))
            };
            all(requirements
                .iter()
                .map(|r| match r {
                    LabelRequirement::In(key, values) => {
                        format!("({} && {})", has(key), one_of(key, values))
                    }
                    LabelRequirement::NotIn(key, values) => {
                        format!("(!{} || !({}))", has(key), one_of(key, values))
                    }
                    LabelRequirement::Exists(key) => has(key),
                    LabelRequirement::DoesNotExist(key) => format!("!{}", has(key)),
                })
                .collect())
        }
        Condition::Namespaces(patterns) => any(patterns
            .iter()
            .map(|p| match p {
                NamePattern::Exact(name) => format!("request.namespace == {}", string(name)),
                NamePattern::Prefix(prefix) => {
                    format!("request.namespace.startsWith({})", string(prefix))
                }
                NamePattern::Suffix(suffix) => {
                    format!("request.namespace.endsWith({})", string(suffix))
                }
            })
            .collect()),
    }
}

/// The "needs injection" condition: some step of the request's kind has something to do.
pub fn needs_injection(program: &Program) -> String {
    any(program
        .kinds
        .iter()
        .map(|k| {
            let work: Vec<String> = k.steps.iter().map(step_work).collect();
            format!("({} && {})", kind_test(&k.kind), any(work))
        })
        .collect())
}

/// The JSONPatch expression of one kind: its steps' operations, or none for another kind.
pub fn mutation(program: &KindProgram) -> String {
    let steps: Vec<String> = program.steps.iter().map(step_operations).collect();
    format!("{} ? {} : []", kind_test(&program.kind), concat(&steps))
}

/// `!list.exists(x, x.key == 'k')` (elements without the key field never match).
fn absent(list: &str, key: &str, wanted: &str) -> String {
    format!(
        "!{list}.exists(x, has(x.{key}) && x.{key} == {})",
        string(wanted)
    )
}

/// Whether a step has something to do (the interpreter: its operations are not empty).
fn step_work(step: &Step) -> String {
    match step {
        Step::Meta {
            owner,
            labels,
            annotations,
        } => {
            let metadata = format!("{}.metadata", access(owner));
            let mut work = vec![format!("!has({metadata})")];
            for (field, entries) in [("labels", labels), ("annotations", annotations)] {
                if entries.is_empty() {
                    continue;
                }
                let map = format!("{metadata}.{field}");
                work.push(format!("!has({map})"));
                work.extend(
                    entries
                        .iter()
                        .map(|(k, _)| format!("!({} in {map})", string(k))),
                );
            }
            all(vec![has_chain(owner), any(work)])
        }
        Step::Put { list, key, items } => {
            let at = access(list);
            let mut work = vec![format!("!has({at})")];
            for item in items {
                work.push(absent(&at, key, &item.key));
                work.push(format!(
                    "{at}.exists(x, {})",
                    uncovered_namesake("x", key, item)
                ));
            }
            format!("({} && {})", has_chain(parent(list)), any(work))
        }
        Step::AppendInEach {
            list,
            skip,
            field,
            key,
            items,
        } => {
            let at = access(list);
            let own_field = format!("c.{field}");
            let mut lacking = vec![format!("!has({own_field})")];
            lacking.extend(items.iter().map(|i| absent(&own_field, key, &i.key)));
            format!(
                "({} && has({at}) && {at}.exists(c, {} && {}))",
                has_chain(parent(list)),
                own(skip),
                any(lacking)
            )
        }
    }
}

/// A container `c` that is the object's own (not one the preset injects).
fn own(skip: &[String]) -> String {
    if skip.is_empty() {
        return "true".to_owned();
    }
    let names: Vec<String> = skip.iter().map(|s| string(s)).collect();
    format!("!(has(c.name) && c.name in [{}])", names.join(", "))
}

/// The operations of one step, as a CEL list of `JSONPatch`.
fn step_operations(step: &Step) -> String {
    match step {
        Step::Meta {
            owner,
            labels,
            annotations,
        } => {
            let metadata = format!("{}.metadata", access(owner));
            let metadata_path: FieldPath = owner.iter().copied().chain(["metadata"]).collect();
            let mut whole = Vec::new();
            let mut parts = Vec::new();
            for (field, entries) in [("labels", labels), ("annotations", annotations)] {
                if entries.is_empty() {
                    continue;
                }
                whole.push(format!("{}: dyn({})", string(field), map_of(entries)));
                let map = format!("{metadata}.{field}");
                let map_path: FieldPath = metadata_path.iter().copied().chain([field]).collect();
                let each: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| {
                        let mut entry = pointer(&map_path);
                        entry.push_back(k.as_str());
                        format!(
                            "({} in {map} ? [] : [{}])",
                            string(k),
                            add(&string(&entry.to_string()), &string(v))
                        )
                    })
                    .collect();
                parts.push(format!(
                    "(has({map}) ? {} : [{}])",
                    concat(&each),
                    add(&path_literal(&map_path), &map_of(entries))
                ));
            }
            let operations = format!(
                "(has({metadata}) ? {} : [{}])",
                concat(&parts),
                add(
                    &path_literal(&metadata_path),
                    &format!("{{{}}}", whole.join(", "))
                )
            );
            if owner.is_empty() {
                // The object itself: always there.
                operations
            } else {
                format!("({} ? {operations} : [])", has_chain(owner))
            }
        }
        Step::Put { list, key, items } => {
            let at = access(list);
            let append_path = string(&format!("{}/-", pointer(list)));
            let element_path = format!("{} + string(i)", string(&format!("{}/", pointer(list))));
            let each: Vec<String> = items
                .iter()
                .map(|i| {
                    let value = literal(&i.value);
                    format!(
                        "({} ? [{}] : {at}.transformList(i, x, {}, {}))",
                        absent(&at, key, &i.key),
                        add(&append_path, &value),
                        uncovered_namesake("x", key, i),
                        replace(&element_path, &value)
                    )
                })
                .collect();
            format!(
                "({} ? (has({at}) ? {} : [{}]) : [])",
                has_chain(parent(list)),
                concat(&each),
                add(&path_literal(list), &list_of(items))
            )
        }
        Step::AppendInEach {
            list,
            skip,
            field,
            key,
            items,
        } => {
            let at = access(list);
            let own_field = format!("c.{field}");
            let element = |suffix: &str| {
                format!(
                    "{} + string(i) + {}",
                    string(&format!("{}/", pointer(list))),
                    string(&format!("/{field}{suffix}"))
                )
            };
            let mut lists = vec![format!(
                "{at}.transformList(i, c, {} && !has({own_field}), {})",
                own(skip),
                add(&element(""), &list_of(items))
            )];
            lists.extend(items.iter().map(|i| {
                format!(
                    "{at}.transformList(i, c, {} && has({own_field}) && {}, {})",
                    own(skip),
                    absent(&own_field, key, &i.key),
                    add(&element("/-"), &literal(&i.value))
                )
            }));
            format!(
                "({} && has({at}) ? {} : [])",
                has_chain(parent(list)),
                concat(&lists)
            )
        }
    }
}
