//! What kube-apiserver does to a custom resource before validating it:
//! prune unknown fields, apply defaults, drop nulls of non-nullable fields.
//! Follows kubernetes/apiextensions-apiserver (v0.32.0)
//! `pkg/apiserver/schema/pruning/algorithm.go`, `pkg/apiserver/schema/defaulting/algorithm.go`
//! and `prunenulls.go`.

use serde_json::Value;

use super::structural::{join, AdditionalProperties, Schema};

/// Removes fields the schema does not know; returns their paths, sorted
/// (`spec.foo`, `status.conditions[0].bar`), which kube-apiserver reports as
/// `unknown field "…"` warnings. The root counts as an embedded resource:
/// its apiVersion, kind and metadata stay.
pub(crate) fn prune(obj: &mut Value, schema: &Schema) -> Vec<String> {
    let mut pruned = Vec::new();
    walk(obj, Some(schema), true, false, "", &mut pruned);
    pruned.sort();
    pruned
}

const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// `prune` (skip = false) and `skipPrune` (skip = true: below
/// x-kubernetes-preserve-unknown-fields, unknown fields stay but known ones
/// are still pruned inside).
fn walk(
    v: &mut Value,
    s: Option<&Schema>,
    embedded: bool,
    skip: bool,
    path: &str,
    out: &mut Vec<String>,
) {
    let skip = skip || s.is_some_and(|s| s.preserves_unknown());
    if skip && s.is_none() {
        return;
    }
    match v {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    out.push(join(path, k));
                }
                m.clear();
                return;
            };
            let mut drop = Vec::new();
            for (k, child) in m.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let cpath = join(path, k);
                if let Some(p) = s.properties.get(k) {
                    walk(child, Some(p), p.embedded_resource, false, &cpath, out);
                } else if let Some(a) = &s.additional_properties {
                    // additionalProperties: true has no schema: its values are pruned bare.
                    let a = match a {
                        AdditionalProperties::Schema(a) => Some(a.as_ref()),
                        AdditionalProperties::Bool(_) => None,
                    };
                    walk(
                        child,
                        a,
                        a.is_some_and(|a| a.embedded_resource),
                        false,
                        &cpath,
                        out,
                    );
                } else if !skip {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        out.push(cpath);
                    }
                    drop.push(k.clone());
                }
            }
            for k in drop {
                m.remove(&k);
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, item) in a.iter_mut().enumerate() {
                let embedded = items.is_some_and(|s| s.embedded_resource);
                walk(item, items, embedded, skip, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
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
                    default_null(child, a);
                    apply_defaults(child, a);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for item in a.iter_mut() {
                    default_null(item, items);
                    apply_defaults(item, items);
                }
            }
        }
        _ => {}
    }
}

/// `isNonNullableNull`: a null where a non-nullable schema has a default.
fn default_null(v: &mut Value, s: &Schema) {
    if let (Value::Null, false, Some(d)) = (&*v, s.nullable, &s.default) {
        *v = d.clone();
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
