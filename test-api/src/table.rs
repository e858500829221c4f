//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`):
//! kubectl get asks for a meta.k8s.io/v1 Table and prints its columns, adding
//! `-L` label columns itself from each row's object metadata. Columns follow
//! kube-apiserver's printers for Nodes (`pkg/printers/internalversion/printers.go`)
//! and the name/age default for everything else.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::resources::ResourceType;
use crate::schema::PrinterColumn;

/// Does the Accept header ask for a Table?
pub fn wants_table(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table"))
    })
}

/// kubectl's `duration.HumanDuration` (k8s.io/apimachinery `pkg/util/duration`).
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s}s")
    } else if s < 600 {
        format!("{}m{}s", s / 60, s % 60)
    } else if s < 3 * 3600 {
        format!("{}m", s / 60)
    } else if s < 8 * 3600 {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else if s < 8 * 86400 {
        format!("{}d{}h", s / 86400, (s % 86400) / 3600)
    } else {
        format!("{}d", s / 86400)
    }
}

fn age(obj: &Value) -> String {
    let ts = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str);
    match ts.and_then(|t| humantime::parse_rfc3339(t).ok()) {
        Some(t) => human_duration(SystemTime::now().duration_since(t).unwrap_or_default()),
        None => "<unknown>".to_string(),
    }
}

fn node_status(obj: &Value) -> String {
    let ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str));
    let mut s = match ready {
        Some("True") => "Ready".to_string(),
        _ => "NotReady".to_string(),
    };
    if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    s
}

fn node_roles(obj: &Value) -> String {
    let mut roles: Vec<String> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    }
}

fn col(name: &str, format: &str, description: &str) -> Value {
    json!({"name": name, "type": "string", "format": format, "description": description, "priority": 0})
}

fn row_object(obj: &Value, include: &str) -> Value {
    match include {
        "None" => Value::Null,
        "Object" => obj.clone(),
        _ => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// The subset of JSONPath the released CRDs' printer columns use: `.a.b`
/// and `.list[?(@.key=="value")].field`.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    let mut rest = path.strip_prefix('.')?;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[?(@.") {
            let (cond, after) = r.split_once(")]")?;
            let (key, want) = cond.split_once("==")?;
            let want = want.trim().trim_matches('"').trim_matches('\'');
            cur = cur
                .as_array()?
                .iter()
                .find(|e| e.get(key.trim()).and_then(Value::as_str) == Some(want))?;
            rest = after.strip_prefix('.').unwrap_or(after);
            continue;
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let (field, after) = rest.split_at(end);
        cur = cur.get(field)?;
        rest = after.strip_prefix('.').unwrap_or(after);
    }
    Some(cur)
}

/// A cell as apiextensions' table convertor fills it: dates as ages,
/// missing values as null (kubectl prints `<none>`).
fn crd_cell(obj: &Value, c: &PrinterColumn) -> Value {
    match json_path(obj, &c.json_path) {
        None => Value::Null,
        Some(Value::String(t)) if c.ty == "date" => match humantime::parse_rfc3339(t) {
            Ok(t) => json!(human_duration(
                SystemTime::now().duration_since(t).unwrap_or_default()
            )),
            Err(_) => json!(t),
        },
        Some(v) => v.clone(),
    }
}

/// A Table of `items`; `include` is the `includeObject` parameter;
/// `printer_columns` are a custom resource's `additionalPrinterColumns`.
pub fn table(
    rt: &ResourceType,
    items: &[Value],
    resource_version: Option<u64>,
    include: &str,
    printer_columns: Option<&[PrinterColumn]>,
) -> Value {
    if let Some(cols) = printer_columns.filter(|c| !c.is_empty()) {
        let mut defs = vec![col(
            "Name",
            "name",
            "Name must be unique within a namespace.",
        )];
        defs.extend(cols.iter().map(|c| {
            json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
        }));
        let rows: Vec<Value> = items
            .iter()
            .map(|o| {
                let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
                cells.extend(cols.iter().map(|c| crd_cell(o, c)));
                json!({"cells": cells, "object": row_object(o, include)})
            })
            .collect();
        let mut metadata = json!({});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv.to_string());
        }
        return json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": defs, "rows": rows});
    }
    let node = rt.group.is_empty() && rt.plural == "nodes";
    let columns = if node {
        vec![
            col("Name", "name", "Name must be unique within a namespace."),
            col("Status", "", "The status of the node"),
            col("Roles", "", "The roles of the node"),
            col("Age", "", "CreationTimestamp is a timestamp representing the server time when this object was created."),
            col("Version", "", "Kubelet Version reported by the node."),
        ]
    } else {
        vec![
            col("Name", "name", "Name must be unique within a namespace."),
            col("Age", "", "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ]
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let name = o.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            let cells = if node {
                json!([
                    name,
                    node_status(o),
                    node_roles(o),
                    age(o),
                    o.pointer("/status/nodeInfo/kubeletVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ])
            } else {
                json!([name, age(o)])
            };
            json!({"cells": cells, "object": row_object(o, include)})
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv.to_string());
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_as_kubectl_prints_them() {
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_secs(130)), "2m10s");
        assert_eq!(human_duration(Duration::from_secs(3600)), "60m");
        assert_eq!(human_duration(Duration::from_secs(3 * 86400)), "3d0h");
    }

    #[test]
    fn json_paths_of_printer_columns() {
        let o = json!({"status": {"nodeRef": {"name": "w1"}, "conditions": [{"type": "Ready", "status": "True"}, {"type": "Available", "status": "False"}]}});
        assert_eq!(json_path(&o, ".status.nodeRef.name"), Some(&json!("w1")));
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Available\")].status"),
            Some(&json!("False"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Paused\")].status"),
            None
        );
        assert_eq!(json_path(&o, ".spec.version"), None);
    }

    #[test]
    fn accept_header() {
        assert!(wants_table(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(!wants_table(Some("application/json")));
        assert!(!wants_table(None));
    }
}
