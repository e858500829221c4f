//! JSON merge patch (RFC 7386) as `gopkg.in/evanphx/json-patch.v4` v4.12
//! `MergePatch` applies it (kube-apiserver's `jsonPatcher` for
//! `application/merge-patch+json`, and `kubectl patch --type=merge`).
//!
//! Differences from the RFC that the library has and we therefore keep:
//! nulls are pruned from a *new* object value but a null *element* of a list is
//! kept; when the stored value is an object and the patch value is not, the
//! patch value is taken as it is (nulls inside it included).

use serde_json::{Map, Value};

use super::PatchError;

/// `errBadJSONPatch` of evanphx/json-patch; kube-apiserver answers it with 400.
const BAD_PATCH: &str = "Invalid JSON Patch";
/// `errBadJSONDoc`; kube-apiserver passes it on unclassified (500).
const BAD_DOC: &str = "Invalid JSON Document";

pub(super) fn apply(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let patch: Value =
        serde_json::from_slice(patch).map_err(|_| PatchError::BadRequest(BAD_PATCH.into()))?;
    match (original, patch) {
        (_, Value::Null) => Err(PatchError::BadRequest(BAD_PATCH.into())),
        (Value::Null, _) => Err(PatchError::Internal(BAD_DOC.into())),
        (Value::Object(doc), Value::Object(patch)) => {
            let mut doc = doc.clone();
            merge_docs(&mut doc, patch);
            Ok(Value::Object(doc))
        }
        // A document that is not an object is simply replaced by the patch.
        (_, Value::Object(mut patch)) => {
            prune_doc_nulls(&mut patch);
            Ok(Value::Object(patch))
        }
        (_, Value::Array(mut patch)) => {
            prune_ary_nulls(&mut patch);
            Ok(Value::Array(patch))
        }
        _ => Err(PatchError::BadRequest(BAD_PATCH.into())),
    }
}

fn merge_docs(doc: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.remove(&k);
            continue;
        }
        match doc.get_mut(&k) {
            Some(cur) if !cur.is_null() => merge(cur, v),
            _ => {
                let mut v = v;
                prune_nulls(&mut v);
                doc.insert(k, v);
            }
        }
    }
}

fn merge(cur: &mut Value, patch: Value) {
    if let Value::Object(cur_doc) = cur {
        match patch {
            Value::Object(patch_doc) => merge_docs(cur_doc, patch_doc),
            other => *cur = other,
        }
    } else {
        let mut patch = patch;
        prune_nulls(&mut patch);
        *cur = patch;
    }
}

fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(doc) => prune_doc_nulls(doc),
        Value::Array(ary) => prune_ary_nulls(ary),
        _ => {}
    }
}

fn prune_doc_nulls(doc: &mut Map<String, Value>) {
    doc.retain(|_, v| !v.is_null());
    for v in doc.values_mut() {
        prune_nulls(v);
    }
}

/// v4.12 recurses into the elements but keeps null elements themselves.
fn prune_ary_nulls(ary: &mut [Value]) {
    for v in ary.iter_mut() {
        prune_nulls(v);
    }
}
