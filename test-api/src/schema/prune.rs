//! What kube-apiserver does to a custom resource before validating it:
//! prune unknown fields, apply defaults, drop nulls of non-nullable fields.
//! Follows kubernetes/apiextensions-apiserver (v0.32.0)
//! `pkg/apiserver/schema/pruning/algorithm.go`, `pkg/apiserver/schema/defaulting/algorithm.go`
//! and `prunenulls.go`.

use serde_json::{Map, Value};

use super::structural::{join, Schema};

/// Removes fields the schema does not know; returns their paths
/// (`spec.foo`, `status.conditions[0].bar`), which kube-apiserver reports as
/// `unknown field "…"` warnings.
pub(crate) fn prune(obj: &mut Value, schema: &Schema) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_value(obj, Some(schema), true, "", &mut pruned);
    pruned
}

fn prune_value(
    v: &mut Value,
    s: Option<&Schema>,
    resource_root: bool,
    path: &str,
    out: &mut Vec<String>,
) {
    match v {
        Value::Object(m) => prune_object(m, s, resource_root, path, out),
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            // An array without an item schema keeps its items only under
            // x-kubernetes-preserve-unknown-fields (then s is the preserving node).
            if items.is_none() && s.is_some_and(|s| s.preserves_unknown()) {
                return;
            }
            for (i, item) in a.iter_mut().enumerate() {
                let embedded = items.is_some_and(|s| s.embedded_resource);
                prune_value(item, items, embedded, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn prune_object(
    m: &mut Map<String, Value>,
    s: Option<&Schema>,
    resource_root: bool,
    path: &str,
    out: &mut Vec<String>,
) {
    let Some(s) = s else {
        // No schema at all below a known field: everything goes.
        for k in m.keys() {
            out.push(join(path, k));
        }
        m.clear();
        return;
    };
    let addl = s.additional_schema();
    let addl_allows_all = matches!(
        s.additional_properties,
        Some(super::structural::AdditionalProperties::Bool(true))
    );
    let mut drop = Vec::new();
    for (k, child) in m.iter_mut() {
        // apiVersion, kind and metadata of a resource (the root or an embedded
        // one) are kept: ObjectMeta is handled by its own code upstream.
        if resource_root && (k == "apiVersion" || k == "kind" || k == "metadata") {
            continue;
        }
        let cpath = join(path, k);
        if let Some(p) = s.properties.get(k) {
            prune_value(child, Some(p), p.embedded_resource, &cpath, out);
        } else if let Some(a) = addl {
            prune_value(child, Some(a), a.embedded_resource, &cpath, out);
        } else if s.preserves_unknown() || addl_allows_all {
            // Unknown but preserved: kept whole.
        } else {
            drop.push(k.clone());
        }
    }
    for k in drop {
        m.remove(&k);
        out.push(join(path, &k));
    }
}

/// Sets `default` values on missing (or null, non-nullable) fields.
pub(crate) fn apply_defaults(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(m) => {
            for (k, p) in &s.properties {
                if let Some(d) = &p.default {
                    match m.get(k) {
                        None => {
                            m.insert(k.clone(), d.clone());
                        }
                        Some(Value::Null) if !p.nullable => {
                            m.insert(k.clone(), d.clone());
                        }
                        _ => {}
                    }
                }
            }
            let addl = s.additional_schema();
            for (k, child) in m.iter_mut() {
                if let Some(p) = s.properties.get(k) {
                    apply_defaults(child, p);
                } else if let Some(a) = addl {
                    apply_defaults(child, a);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for item in a.iter_mut() {
                    apply_defaults(item, items);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null` values of non-nullable fields without a default: kube-apiserver
/// treats them as absent (so `required` then reports them).
pub(crate) fn drop_nulls(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(m) => {
            let addl = s.additional_schema();
            let mut drop = Vec::new();
            for (k, child) in m.iter_mut() {
                let cs = s.properties.get(k).or(addl);
                let Some(cs) = cs else { continue };
                if child.is_null() {
                    if !cs.nullable && cs.default.is_none() {
                        drop.push(k.clone());
                    }
                } else {
                    drop_nulls(child, cs);
                }
            }
            for k in drop {
                m.remove(&k);
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for item in a.iter_mut() {
                    drop_nulls(item, items);
                }
            }
        }
        _ => {}
    }
}
