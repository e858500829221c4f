//! JSON patch (RFC 6902) as `gopkg.in/evanphx/json-patch.v4` v4.12 applies it:
//! the library kube-apiserver (`handlers/patch.go`, `jsonPatcher`) and
//! `kubectl patch --type=json` link. Its departures from the RFC are what a
//! real server answers, so they are kept (each checked against kubectl in
//! tests/patch_oracle.rs):
//! - `replace` of an absent object member adds it; `copy` from an absent
//!   member, and `add` without `value`, write `null`;
//! - negative array indices count from the end (`SupportNegativeIndices`);
//! - a path is split at `/` and its first segment ignored, so `a/b` acts on
//!   the root member `b`; a path without `/` is "missing";
//! - `replace` of the whole document (`""`) with a value that is neither an
//!   object nor an array is a silent no-op;
//! - `test` of an absent member against `null` succeeds.
//!
//! Error texts are the library's (`errors.Wrapf` chains), which kubectl prints;
//! kube-apiserver answers any apply error with a 422 of fixed wording.

use serde_json::{Map, Value};

use super::gofmt::go_quote;
use super::{PatchError, GENERIC_422};

/// `maxJSONPatchOperations` of kube-apiserver's patch handler.
const MAX_OPERATIONS: usize = 10_000;

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";
const TEST_FAILED: &str = "test failed";

pub(super) fn apply(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops = decode(patch).map_err(PatchError::BadRequest)?;
    if ops.len() > MAX_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut doc = original.clone();
    for op in &ops {
        apply_op(&mut doc, op).map_err(|e| match e {
            OpError::Failed(detail) => PatchError::Unprocessable {
                message: GENERIC_422.to_string(),
                detail,
            },
            // Where the Go library dereferences nil (it panics; the server's
            // recovery answers 500).
            OpError::Panic(detail) => PatchError::Panic(detail),
        })?;
    }
    Ok(doc)
}

/// `DecodePatch`: a JSON array of objects; `null` is an empty patch, a `null`
/// element an operation without any member.
fn decode(patch: &[u8]) -> Result<Vec<Map<String, Value>>, String> {
    let v: Value = serde_json::from_slice(patch).map_err(|e| e.to_string())?;
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                json_type(&other)
            ))
        }
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Object(m) => Ok(m),
            Value::Null => Ok(Map::new()),
            other => Err(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                json_type(&other)
            )),
        })
        .collect()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

enum OpError {
    Failed(String),
    Panic(String),
}

fn failed(s: impl Into<String>) -> OpError {
    OpError::Failed(s.into())
}

/// A member of an operation read as a string (`Operation.Path` / `From`).
/// `Err` carries the library's error text.
fn string_member(op: &Map<String, Value>, name: &str, missing: &str) -> Result<String, String> {
    match op.get(name) {
        None | Some(Value::Null) => Err(format!("{missing}: {MISSING}")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go value of type string",
            json_type(other)
        )),
    }
}

fn path_of(op: &Map<String, Value>) -> Result<String, String> {
    string_member(op, "path", "operation missing path field")
}

fn from_of(op: &Map<String, Value>) -> Result<String, String> {
    string_member(op, "from", "operation, missing from field")
}

fn apply_op(doc: &mut Value, op: &Map<String, Value>) -> Result<(), OpError> {
    let kind = match op.get("op") {
        Some(Value::String(s)) => s.as_str(),
        _ => "unknown",
    };
    // `value` absent is Go's nil node; `null` is a node without raw bytes.
    let value = op.get("value");
    match kind {
        "add" => {
            let path = path_of(op)
                .map_err(|_| failed(format!("add operation failed to decode path: {MISSING}")))?;
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "add operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                ))
            })?;
            container_add(con, &key, value.cloned().unwrap_or(Value::Null))
                .map_err(|e| failed(format!("error in add for path: '{path}': {e}")))
        }
        "remove" => {
            let path = path_of(op).map_err(|_| {
                failed(format!("remove operation failed to decode path: {MISSING}"))
            })?;
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                ))
            })?;
            container_remove(con, &key)
                .map(|_| ())
                .map_err(|e| failed(format!("error in remove for path: '{path}': {e}")))
        }
        "replace" => {
            let path = path_of(op)
                .map_err(|e| failed(format!("replace operation failed to decode path: {e}")))?;
            if path.is_empty() {
                return match value {
                    Some(v @ (Value::Object(_) | Value::Array(_))) => {
                        *doc = v.clone();
                        Ok(())
                    }
                    // `errors.Wrapf(nil, …)` is nil: the library reports success.
                    Some(_) => Ok(()),
                    None => Err(OpError::Panic(
                        "runtime error: invalid memory address or nil pointer dereference".into(),
                    )),
                };
            }
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "replace operation does not apply: doc is missing path: {path}: {MISSING}"
                ))
            })?;
            let v = value.cloned().unwrap_or(Value::Null);
            match con {
                Value::Object(m) => {
                    m.insert(key, v);
                    Ok(())
                }
                Value::Array(a) => {
                    let idx = array_get_index(a, &key).map_err(|_| {
                        failed(format!(
                            "replace operation does not apply: doc is missing key: {path}: {MISSING}"
                        ))
                    })?;
                    a[idx] = v;
                    Ok(())
                }
                _ => Err(failed(format!(
                    "replace operation does not apply: doc is missing path: {path}: {MISSING}"
                ))),
            }
        }
        "move" => {
            let from = from_of(op)
                .map_err(|e| failed(format!("move operation failed to decode from: {e}")))?;
            let (con, key) = find_object(doc, &from).ok_or_else(|| {
                failed(format!(
                    "move operation does not apply: doc is missing from path: {from}: {MISSING}"
                ))
            })?;
            if let Value::Array(a) = &*con {
                array_get_index(a, &key)
                    .map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
            }
            let val = container_remove(con, &key)
                .map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
            let path = path_of(op)
                .map_err(|e| failed(format!("move operation failed to decode path: {e}")))?;
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
                ))
            })?;
            container_add(con, &key, val)
                .map_err(|e| failed(format!("error in move for path: '{path}': {e}")))
        }
        "test" => {
            let path = path_of(op)
                .map_err(|e| failed(format!("test operation failed to decode path: {e}")))?;
            let test_failed = || failed(format!("testing value {path} failed: {TEST_FAILED}"));
            if path.is_empty() {
                return match value {
                    Some(v) if v == &*doc => Ok(()),
                    Some(_) => Err(test_failed()),
                    None => Err(OpError::Panic(
                        "runtime error: invalid memory address or nil pointer dereference".into(),
                    )),
                };
            }
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "test operation does not apply: is missing path: {path}: {MISSING}"
                ))
            })?;
            let found = container_get(con, &key)
                .map_err(|e| failed(format!("error in test for path: '{path}': {e}")))?;
            match (found, value) {
                // An absent member and a member holding null are both Go's nil.
                (None | Some(Value::Null), Some(Value::Null)) => Ok(()),
                (None | Some(Value::Null), None) => Err(OpError::Panic(
                    "runtime error: invalid memory address or nil pointer dereference".into(),
                )),
                (Some(found), Some(v)) if found == v => Ok(()),
                _ => Err(test_failed()),
            }
        }
        "copy" => {
            let from = from_of(op)
                .map_err(|e| failed(format!("copy operation failed to decode from: {e}")))?;
            let (con, key) = find_object(doc, &from).ok_or_else(|| {
                failed(format!(
                    "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
                ))
            })?;
            let val = container_get(con, &key)
                .map_err(|e| failed(format!("error in copy for from: '{from}': {e}")))?
                .cloned()
                .unwrap_or(Value::Null);
            let path = path_of(op)
                .map_err(|_| failed(format!("copy operation failed to decode path: {MISSING}")))?;
            let (con, key) = find_object(doc, &path).ok_or_else(|| {
                failed(format!(
                    "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
                ))
            })?;
            container_add(con, &key, val)
                .map_err(|e| failed(format!("error while adding value during copy: {e}")))
        }
        other => Err(failed(format!("Unexpected kind: {other}"))),
    }
}

/// `decodePatchKey`: `~1` then `~0`, in that order.
fn decode_patch_key(k: &str) -> String {
    k.replace("~1", "/").replace("~0", "~")
}

/// `findObject`: the container holding the last segment of `path`, and that
/// segment decoded. Intermediate nulls, scalars and out-of-range indices make
/// the path "missing".
fn find_object<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let parts = &split[1..split.len() - 1];
    let key = split[split.len() - 1];
    let mut cur = doc;
    for part in parts {
        let part = decode_patch_key(part);
        let next = match cur {
            Value::Object(m) => m.get_mut(&part)?,
            Value::Array(a) => {
                let idx = array_get_index(a, &part).ok()?;
                &mut a[idx]
            }
            _ => return None,
        };
        match next {
            Value::Object(_) | Value::Array(_) => cur = next,
            _ => return None,
        }
    }
    Some((cur, decode_patch_key(key)))
}

/// `strconv.Atoi` with its error texts.
fn atoi(key: &str) -> Result<i64, String> {
    key.parse::<i64>().map_err(|e| {
        let what = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {what}", go_quote(key))
    })
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: {INVALID_INDEX}")
}

/// `partialArray.get`'s index resolution (negative counts from the end).
fn array_get_index(a: &[Value], key: &str) -> Result<usize, String> {
    let mut idx = atoi(key)?;
    let len = a.len() as i64;
    if idx < 0 {
        if idx < -len {
            return Err(invalid_index(idx));
        }
        idx += len;
    }
    if idx >= len {
        return Err(invalid_index(idx));
    }
    Ok(idx as usize)
}

/// `get` on a container: `Ok(None)` for an absent object member.
fn container_get<'a>(con: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match con {
        Value::Object(m) => Ok(m.get(key)),
        Value::Array(a) => array_get_index(a, key).map(|i| Some(&a[i])),
        _ => Ok(None),
    }
}

fn container_add(con: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match con {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(val);
                return Ok(());
            }
            let mut idx = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = a.len() as i64 + 1;
            if idx >= size {
                return Err(invalid_index(idx));
            }
            if idx < 0 {
                if idx < -size {
                    return Err(invalid_index(idx));
                }
                idx += size;
            }
            a.insert(idx as usize, val);
            Ok(())
        }
        _ => Err(MISSING.to_string()),
    }
}

/// `remove` on a container, returning what was removed.
fn container_remove(con: &mut Value, key: &str) -> Result<Value, String> {
    match con {
        Value::Object(m) => m
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(a) => {
            let mut idx = atoi(key)?;
            let len = a.len() as i64;
            if idx >= len {
                return Err(invalid_index(idx));
            }
            if idx < 0 {
                if idx < -len {
                    return Err(invalid_index(idx));
                }
                idx += len;
            }
            Ok(a.remove(idx as usize))
        }
        _ => Err(MISSING.to_string()),
    }
}
