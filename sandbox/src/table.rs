//! Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as
//! `kubectl get` requests it: Name, the kind's columns (a CRD's `additionalPrinterColumns`), Age.

use serde_json::{Value, json};

use crate::json::elements;
use crate::resource::{Column, ResourceType};

/// Evaluates the simple JSONPath forms printer columns use: `.a.b`, `.a[0].b`,
/// `.a[?(@.type=="Ready")].status`, with an optional `{...}` wrapper.
pub fn eval_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let p = path.trim().trim_start_matches('{').trim_end_matches('}');
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut cur = obj;
    let mut rest = p;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.get(field)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|e| e.get(field.trim()).and_then(Value::as_str) == Some(want))?;
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.get(i)?;
            } else {
                let key = inner.trim_matches(|c| c == '"' || c == '\'');
                cur = cur.get(key)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

/// A duration as kubectl prints ages: `5s`, `3m2s`, `4h`, `2d5h`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    if s < 120 {
        format!("{s}s")
    } else if s < 600 {
        format!("{}m{}s", s / 60, s % 60)
    } else if s < 3 * 3600 {
        let (m, r) = (s / 60, (s % 3600) / 60);
        if s < 3600 {
            format!("{m}m")
        } else {
            format!("{}h{}m", s / 3600, r)
        }
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86400)
    }
}

fn age(obj: &Value) -> Value {
    let Some(ts) = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
    else {
        return json!("<unknown>");
    };
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => json!(human_duration(crate::clock::seconds_since(t))),
        Err(_) => json!("<unknown>"),
    }
}

fn cell(obj: &Value, c: &Column) -> Value {
    let Some(v) = eval_path(obj, &c.json_path) else {
        return Value::Null;
    };
    match c.type_.as_str() {
        "date" => match v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
            Some(t) => json!(human_duration(crate::clock::seconds_since(t))),
            None => v.clone(),
        },
        "integer" | "number" | "boolean" => v.clone(),
        _ => match v {
            Value::String(_) => v.clone(),
            Value::Null => Value::Null,
            other => json!(other.to_string()),
        },
    }
}

fn builtin_cells(rt: &ResourceType, obj: &Value) -> Option<(Vec<Column>, Vec<Value>)> {
    let c = |name: &str, t: &str| Column {
        name: name.into(),
        type_: t.into(),
        json_path: String::new(),
        priority: 0,
        description: String::new(),
    };
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            let statuses = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses
                .iter()
                .filter(|s| s["ready"].as_bool() == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_i64())
                .sum();
            let waiting = statuses
                .iter()
                .find_map(|s| s.pointer("/state/waiting/reason").and_then(Value::as_str));
            let mut status = obj
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("Pending")
                .to_string();
            if let Some(w) = waiting {
                status = w.to_string();
            }
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                status = "Terminating".into();
            }
            Some((
                vec![
                    c("Ready", "string"),
                    c("Status", "string"),
                    c("Restarts", "string"),
                ],
                vec![
                    json!(format!("{ready}/{total}")),
                    json!(status),
                    json!(restarts.to_string()),
                ],
            ))
        }
        ("apps", "Deployment") => {
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let n = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
            Some((
                vec![
                    c("Ready", "string"),
                    c("Up-to-date", "integer"),
                    c("Available", "integer"),
                ],
                vec![
                    json!(format!("{}/{want}", n("/status/readyReplicas"))),
                    json!(n("/status/updatedReplicas")),
                    json!(n("/status/availableReplicas")),
                ],
            ))
        }
        ("", "Service") => {
            let ports: Vec<String> = elements(obj.pointer("/spec/ports"))
                .map(|p| {
                    let port = p["port"].as_i64().unwrap_or(0);
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(np) => format!("{port}:{np}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect();
            let ports = if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            };
            let s = |p: &str| {
                obj.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("<none>")
                    .to_string()
            };
            Some((
                vec![
                    c("Type", "string"),
                    c("Cluster-IP", "string"),
                    c("External-IP", "string"),
                    c("Port(s)", "string"),
                ],
                vec![
                    json!(s("/spec/type")),
                    json!(s("/spec/clusterIP")),
                    json!("<none>"),
                    json!(ports),
                ],
            ))
        }
        ("", "ConfigMap") | ("", "Secret") => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + obj
                    .get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            Some((vec![c("Data", "integer")], vec![json!(n)]))
        }
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => {
            let n = obj
                .get("webhooks")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Some((vec![c("Webhooks", "integer")], vec![json!(n)]))
        }
        ("", "Endpoints") => {
            let mut eps = Vec::new();
            for s in elements(obj.get("subsets")) {
                let port = s.pointer("/ports/0/port").and_then(Value::as_i64);
                for a in elements(s.get("addresses")) {
                    let ip = a["ip"].as_str().unwrap_or("");
                    eps.push(match port {
                        Some(p) => format!("{ip}:{p}"),
                        None => ip.to_string(),
                    });
                }
            }
            Some((
                vec![c("Endpoints", "string")],
                vec![json!(if eps.is_empty() {
                    "<none>".to_string()
                } else {
                    eps.join(",")
                })],
            ))
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            let ports: Vec<String> = elements(obj.get("ports"))
                .filter_map(|p| p["port"].as_i64().map(|n| n.to_string()))
                .collect();
            let addrs: Vec<String> = elements(obj.get("endpoints"))
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            Some((
                vec![c("Ports", "string"), c("Endpoints", "string")],
                vec![json!(ports.join(",")), json!(addrs.join(","))],
            ))
        }
        _ => None,
    }
}

fn column_def(c: &Column, format: &str) -> Value {
    json!({"name": c.name, "type": c.type_, "format": format, "description": c.description, "priority": c.priority})
}

fn row(cells: Vec<Value>, obj: &Value, include: &str) -> Value {
    let mut row = json!({"cells": cells});
    match include {
        "None" => {}
        "Object" => row["object"] = obj.clone(),
        _ => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
            })
        }
    }
    row
}

fn since(ts: Option<&Value>) -> Option<String> {
    let t = ts?.as_str()?.parse::<jiff::Timestamp>().ok()?;
    Some(human_duration(crate::clock::seconds_since(t)))
}

/// A `meta.k8s.io/v1` Table.
fn table(list_meta: Value, defs: Vec<Value>, rows: Vec<Value>) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// Events' columns, as kube-apiserver prints them for both Event APIs: Last Seen, Type, Reason,
/// Object (`kind/name`), Message, and with `-o wide` Subobject, Source, First Seen, Count, Name.
fn event_table(items: &[Value], list_meta: Value, include: &str) -> Value {
    let defs: Vec<Value> = [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ]
    .into_iter()
    .map(|(name, priority)| {
        let (type_, format) = match name {
            "Count" => ("integer", ""),
            "Name" => ("string", "name"),
            _ => ("string", ""),
        };
        json!({"name": name, "type": type_, "format": format, "description": "", "priority": priority})
    })
    .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|served| {
            let e = crate::event::to_core(served);
            let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or("");
            let first = since(e.get("firstTimestamp"))
                .or_else(|| since(e.get("eventTime")))
                .unwrap_or_else(|| "<unknown>".into());
            let last = since(e.pointer("/series/lastObservedTime"))
                .or_else(|| since(e.get("lastTimestamp")))
                .unwrap_or_else(|| first.clone());
            let pick = |a: &'static str, b: &'static str| match s(a) {
                "" => s(b),
                v => v,
            };
            let (component, host) = (
                pick("/source/component", "/reportingComponent"),
                pick("/source/host", "/reportingInstance"),
            );
            let source = if host.is_empty() {
                component.to_string()
            } else {
                format!("{component}, {host}")
            };
            let count = e
                .pointer("/series/count")
                .or_else(|| e.get("count"))
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let cells = vec![
                json!(last),
                json!(s("/type")),
                json!(s("/reason")),
                json!(format!(
                    "{}/{}",
                    s("/involvedObject/kind").to_lowercase(),
                    s("/involvedObject/name")
                )),
                json!(s("/involvedObject/fieldPath")),
                json!(source),
                json!(s("/message").trim()),
                json!(first),
                json!(count),
                json!(s("/metadata/name")),
            ];
            row(cells, served, include)
        })
        .collect();
    table(list_meta, defs, rows)
}

/// The Table for `items` of `rt`. `include` is `None`, `Metadata` (default) or `Object`.
pub fn to_table(rt: &ResourceType, items: &[Value], list_meta: Value, include: &str) -> Value {
    if crate::event::is_event(rt) {
        return event_table(items, list_meta, include);
    }
    let name_col = Column {
        name: "Name".into(),
        type_: "string".into(),
        json_path: ".metadata.name".into(),
        priority: 0,
        description: "Name must be unique within a namespace.".into(),
    };
    let age_col = Column {
        name: "Age".into(),
        type_: "date".into(),
        json_path: ".metadata.creationTimestamp".into(),
        priority: 0,
        description: "CreationTimestamp of the object.".into(),
    };
    // A CRD's additionalPrinterColumns replace the default Age column.
    let has_custom_age = rt
        .columns
        .iter()
        .any(|c| c.name.eq_ignore_ascii_case("age"))
        || (rt.custom && !rt.columns.is_empty());
    let builtin_defs = items
        .first()
        .and_then(|o| builtin_cells(rt, o))
        .map(|(cols, _)| cols)
        .or_else(|| builtin_cells(rt, &json!({})).map(|(cols, _)| cols));
    let mut defs = vec![column_def(&name_col, "name")];
    if let Some(cols) = &builtin_defs {
        defs.extend(cols.iter().map(|c| column_def(c, "")));
    }
    defs.extend(rt.columns.iter().map(|c| column_def(c, "")));
    if !has_custom_age {
        defs.push(column_def(&age_col, ""));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = vec![
                obj.pointer("/metadata/name")
                    .cloned()
                    .unwrap_or(Value::Null),
            ];
            if builtin_defs.is_some()
                && let Some((_, vals)) = builtin_cells(rt, obj)
            {
                cells.extend(vals);
            }
            cells.extend(rt.columns.iter().map(|c| cell(obj, c)));
            if !has_custom_age {
                cells.push(age(obj));
            }
            row(cells, obj, include)
        })
        .collect();
    table(list_meta, defs, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Registry;

    #[test]
    fn jsonpath_supports_fields_indexes_and_filters() {
        let obj = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            eval_path(&obj, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(
            eval_path(&obj, ".status.conditions[0].type"),
            Some(&json!("A"))
        );
        assert_eq!(eval_path(&obj, "{.status.missing}"), None);
    }

    /// The built-in core/v1 resource type `plural`.
    fn core(plural: &str) -> ResourceType {
        Registry::with_builtins()
            .get("", "v1", plural)
            .unwrap()
            .clone()
    }

    fn column_names(table: &Value) -> Vec<&str> {
        table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect()
    }

    #[test]
    fn crd_columns_appear_between_name_and_age() {
        let mut rt = core("configmaps");
        rt.columns = vec![Column {
            name: "Phase".into(),
            type_: "string".into(),
            json_path: ".status.phase".into(),
            priority: 0,
            description: String::new(),
        }];
        rt.kind = "Thing".into();
        rt.group = "x.dev".into();
        let t = to_table(
            &rt,
            &[json!({"metadata": {"name": "a"}, "status": {"phase": "Ready"}})],
            json!({}),
            "None",
        );
        let names = column_names(&t);
        assert_eq!(names, vec!["Name", "Phase", "Age"]);
        assert_eq!(t["rows"][0]["cells"][1], "Ready");
    }

    #[test]
    fn pod_rows_show_readiness_and_restarts() {
        let rt = core("pods");
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let t = to_table(&rt, &[pod], json!({}), "None");
        assert_eq!(t["rows"][0]["cells"][1], "1/1");
        assert_eq!(t["rows"][0]["cells"][2], "Running");
        assert_eq!(t["rows"][0]["cells"][3], "2");
    }

    #[test]
    fn service_rows_list_ports_with_protocols() {
        let rt = core("services");
        let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1",
            "ports": [{"port": 443, "protocol": "TCP"}]}});
        let t = to_table(&rt, &[svc], json!({}), "None");
        let names = column_names(&t);
        assert_eq!(
            names,
            vec![
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age"
            ]
        );
        assert_eq!(t["rows"][0]["cells"][2], "10.96.0.1");
        assert_eq!(t["rows"][0]["cells"][4], "443/TCP");
    }

    #[test]
    fn events_of_both_apis_print_the_same_row() {
        let reg = Registry::with_builtins();
        let core = reg.get("", "v1", "events").unwrap().clone();
        let new = reg.get("events.k8s.io", "v1", "events").unwrap().clone();
        let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e"}, "type": "Normal", "reason": "Synced", "note": "done",
            "regarding": {"kind": "ConfigMap", "name": "c"}, "reportingController": "ctrl",
            "reportingInstance": "ctrl-1", "series": {"count": 3}});
        let a = to_table(&core, &[crate::event::to_core(&event)], json!({}), "None");
        let b = to_table(&new, &[event], json!({}), "None");
        assert_eq!(a, b);
        let shown: Vec<&str> = a["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            shown,
            vec!["Last Seen", "Type", "Reason", "Object", "Message"]
        );
        let cells = &a["rows"][0]["cells"];
        assert_eq!(cells[3], "configmap/c");
        assert_eq!(cells[5], "ctrl, ctrl-1");
        assert_eq!(cells[6], "done");
        assert_eq!(cells[8], 3);
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(7200), "2h0m");
        assert_eq!(human_duration(90000), "25h");
        assert_eq!(human_duration(300000), "3d");
    }
}
