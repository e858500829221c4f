//! Strategic merge patch as `k8s.io/apimachinery/pkg/util/strategicpatch`
//! v0.32 (`patch.go`, `mergeMap` and friends) applies it for built-in kinds,
//! with the options kube-apiserver and kubectl use
//! (`StrategicMergeMapPatchUsingLookupPatchMeta`: parallel deletion lists
//! merged, unmatched nulls ignored). Written from a reading of that file, not
//! copied; the function names below follow upstream's so the two can be read
//! side by side.
//!
//! Values are compared as Go compares decoded JSON (`interface{}` equality):
//! an integer and a float are different types, and comparing two objects or
//! two lists is a Go runtime panic, which we report as a 500 (kube-apiserver
//! recovers it as one; kubectl crashes).
//!
//! Go iterates a patch map in random order; where that order matters upstream
//! (a list and its `$deleteFromPrimitiveList` sharing an item) we take the
//! keys in sorted order, so `$deleteFromPrimitiveList/x` before `x`.

use serde_json::{Map, Value};

use super::gofmt::{go_type_name, go_v};
use super::meta::Schema;
use super::{PatchError, PatchMeta, GENERIC_422};

const DIRECTIVE: &str = "$patch";
const DELETE: &str = "delete";
const REPLACE: &str = "replace";
const MERGE: &str = "merge";
const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

// mergepatch's sentinel errors (`pkg/util/mergepatch/errors.go`).
const ERR_BAD_JSON_DOC: &str = "invalid JSON document";
const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";
const ERR_BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

const NIL_PANIC: &str = "runtime error: invalid memory address or nil pointer dereference";

/// An error of the merge, classified as kube-apiserver's
/// `interpretStrategicMergePatchError` classifies it.
#[derive(Debug)]
enum SmpError {
    /// A sentinel kube-apiserver answers with 400.
    BadRequest(&'static str),
    /// A sentinel kube-apiserver answers with 422.
    Invalid(&'static str),
    /// Any other error: passed on, so a 500.
    Other(String),
    /// Where upstream panics (a 500 after the server's recovery).
    Panic(String),
}

type Res<T> = Result<T, SmpError>;

fn other(s: impl Into<String>) -> SmpError {
    SmpError::Other(s.into())
}

impl From<SmpError> for PatchError {
    fn from(e: SmpError) -> PatchError {
        match e {
            SmpError::BadRequest(m) => PatchError::BadRequest(m.to_string()),
            SmpError::Invalid(m) => PatchError::Unprocessable {
                message: GENERIC_422.to_string(),
                detail: m.to_string(),
            },
            SmpError::Other(m) => PatchError::Internal(m),
            SmpError::Panic(m) => PatchError::Panic(m),
        }
    }
}

pub(super) fn apply(original: &Value, patch: &[u8], meta: &PatchMeta) -> Result<Value, PatchError> {
    let schema = meta.schema().map_err(PatchError::Internal)?;
    // kube-apiserver decodes the body into a map: anything else is a 400.
    let patch: Value =
        serde_json::from_slice(patch).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    let patch = match patch {
        Value::Object(m) => m,
        // `null` decodes into an empty map: nothing to do.
        Value::Null => Map::new(),
        _ => return Err(PatchError::BadRequest(ERR_BAD_JSON_DOC.to_string())),
    };
    let Value::Object(original) = original.clone() else {
        return Err(PatchError::BadRequest(ERR_BAD_JSON_DOC.to_string()));
    };
    Ok(Value::Object(merge_map(original, patch, &schema)?))
}

/// Go's dynamic type of a decoded JSON value, as `reflect.TypeOf` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoKind {
    Nil,
    Bool,
    String,
    Int,
    Float,
    Map,
    Slice,
}

fn kind_of(v: &Value) -> GoKind {
    match v {
        Value::Null => GoKind::Nil,
        Value::Bool(_) => GoKind::Bool,
        Value::String(_) => GoKind::String,
        // apimachinery's JSON decoding keeps integers that fit int64 as int64.
        Value::Number(n) if n.as_i64().is_some() => GoKind::Int,
        Value::Number(_) => GoKind::Float,
        Value::Object(_) => GoKind::Map,
        Value::Array(_) => GoKind::Slice,
    }
}

/// Go's `==` on two `interface{}` values.
fn go_eq(a: &Value, b: &Value) -> Res<bool> {
    let (ka, kb) = (kind_of(a), kind_of(b));
    if ka != kb {
        return Ok(false);
    }
    match ka {
        GoKind::Map | GoKind::Slice => Err(SmpError::Panic(format!(
            "runtime error: comparing uncomparable type {}",
            go_type_name(a)
        ))),
        GoKind::Float => Ok(a.as_f64() == b.as_f64()),
        _ => Ok(a == b),
    }
}

/// Using a value as a Go map key (`map[interface{}]…`): maps and lists panic.
fn hashable(v: &Value) -> Res<()> {
    match v {
        Value::Object(_) | Value::Array(_) => Err(SmpError::Panic(format!(
            "runtime error: hash of unhashable type {}",
            go_type_name(v)
        ))),
        _ => Ok(()),
    }
}

fn contains(list: &[Value], v: &Value) -> Res<bool> {
    for x in list {
        if go_eq(x, v)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn err_bad_arg_type(expected: &str, actual: &Value) -> SmpError {
    other(format!(
        "expected a {expected}, but received a {}",
        go_type_name(actual)
    ))
}

const MAP_TYPE: &str = "map[string]interface {}";
const SLICE_TYPE: &str = "[]interface {}";

fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    other(format!(
        "map: {} does not contain declared merge key: {key}",
        go_v(&Value::Object(m.clone()))
    ))
}

fn err_bad_patch_type(t: &Value, m: &Map<String, Value>) -> SmpError {
    other(format!(
        "unknown patch type: {} in map: {}",
        go_s(t),
        go_v(&Value::Object(m.clone()))
    ))
}

/// `fmt`'s `%s` of an interface value.
fn go_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Object(_) | Value::Array(_) => go_v(v),
        _ => format!("%!s({}={})", go_type_name(v), go_v(v)),
    }
}

/// `handleDirectiveInMergeMap`.
fn handle_directive_in_merge_map(
    directive: &Value,
    mut patch: Map<String, Value>,
) -> Res<Map<String, Value>> {
    match directive.as_str() {
        Some(REPLACE) => {
            patch.remove(DIRECTIVE);
            Ok(patch)
        }
        Some(DELETE) => Ok(Map::new()),
        _ => Err(err_bad_patch_type(directive, &patch)),
    }
}

/// `extractKey`: the field a `$prefix/field` key names.
fn extract_key(s: &str, prefix: &str) -> Res<String> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(SmpError::BadRequest(
            if prefix == DELETE_FROM_PRIMITIVE_LIST {
                ERR_BAD_PRIMITIVE_LIST
            } else {
                ERR_BAD_SET_ELEMENT_ORDER
            },
        )),
    }
}

/// `extractRetainKeysPatchStrategy`: the strategy other than retainKeys.
fn patch_strategy(strategies: &[String]) -> Res<String> {
    match strategies {
        [] => Ok(String::new()),
        [one] if one == RETAIN_KEYS_STRATEGY => Ok(String::new()),
        [one] => Ok(one.clone()),
        [a, b] if a == RETAIN_KEYS_STRATEGY => Ok(b.clone()),
        [a, b] if b == RETAIN_KEYS_STRATEGY => Ok(a.clone()),
        _ => Err(other(format!(
            "unexpected patch strategy: [{}]",
            strategies.join(" ")
        ))),
    }
}

/// `applyRetainKeysDirective`.
fn apply_retain_keys_directive(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Res<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(SmpError::BadRequest(ERR_BAD_RETAIN_KEYS));
    };
    for v in &retain {
        hashable(v)?;
    }
    let retained = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !retained(k) {
            return Err(SmpError::BadRequest(ERR_BAD_RETAIN_KEYS));
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// `removeDirectives`: `None` when the value itself is a directive map.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        v => Some(v),
    }
}

/// `discardNullValuesFromPatch`: drops null members of maps at any depth
/// (null list elements stay).
fn discard_null_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            for v in m.values_mut() {
                discard_null_values(v);
            }
        }
        Value::Array(a) => {
            for v in a.iter_mut() {
                discard_null_values(v);
            }
        }
        _ => {}
    }
}

/// `mergeMap`.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: &Schema,
) -> Res<Map<String, Value>> {
    if let Some(directive) = patch.get(DIRECTIVE).cloned() {
        return handle_directive_in_merge_map(&directive, patch);
    }
    apply_retain_keys_directive(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (key, patch_v) in patch {
        let mut k = key;
        let mut is_delete_list = false;
        if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let field = extract_key(&k, DELETE_FROM_PRIMITIVE_LIST)?;
            is_delete_list = true;
            if !field.is_empty() {
                k = field;
            }
        }
        if patch_v.is_null() {
            original.remove(&k);
            continue;
        }
        let Some(orig_v) = original.remove(&k) else {
            if !is_delete_list {
                let mut patch_v = patch_v;
                discard_null_values(&mut patch_v);
                if let Some(v) = remove_directives(patch_v) {
                    original.insert(k, v);
                }
            }
            continue;
        };
        if kind_of(&orig_v) != kind_of(&patch_v) {
            if is_delete_list {
                original.insert(k, orig_v);
            } else {
                let mut patch_v = patch_v;
                discard_null_values(&mut patch_v);
                if let Some(v) = remove_directives(patch_v) {
                    original.insert(k, v);
                }
            }
            continue;
        }
        match (orig_v, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                let (sub, field) = schema.lookup_struct(&k).map_err(SmpError::Other)?;
                let strategy = patch_strategy(&field.strategies)?;
                let merged = if strategy != REPLACE {
                    merge_map(o, p, &sub)?
                } else {
                    p
                };
                original.insert(k, Value::Object(merged));
            }
            (Value::Array(o), Value::Array(p)) => {
                let (sub, field) = schema.lookup_slice(&k).map_err(SmpError::Other)?;
                let strategy = patch_strategy(&field.strategies)?;
                let merged =
                    merge_slice_handler(o, p, &sub, &strategy, &field.merge_key, is_delete_list)?;
                original.insert(k, Value::Array(merged));
            }
            (_, patch_v) => {
                if let Some(v) = remove_directives(patch_v) {
                    original.insert(k, v);
                }
            }
        }
    }
    Ok(original)
}

/// `mergeSliceHandler`.
fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: &Schema,
    strategy: &str,
    merge_key: &str,
    is_delete_list: bool,
) -> Res<Vec<Value>> {
    if strategy == MERGE || is_delete_list {
        merge_slice(original, patch, schema, merge_key, is_delete_list)
    } else {
        Ok(patch)
    }
}

/// `sliceElementType`: the one Go type of all elements of the lists.
fn slice_element_type(lists: &[&[Value]]) -> Res<GoKind> {
    let mut prev: Option<GoKind> = None;
    for list in lists {
        for v in list.iter() {
            let cur = kind_of(v);
            match prev {
                None => {
                    // reflect.TypeOf(nil) is nil and upstream calls Kind() on it.
                    if cur == GoKind::Nil {
                        return Err(SmpError::Panic(NIL_PANIC.to_string()));
                    }
                    if cur == GoKind::Slice {
                        return Err(SmpError::Invalid(ERR_NO_LIST_OF_LISTS));
                    }
                    prev = Some(cur);
                }
                Some(p) if p != cur => {
                    let all: Vec<String> = lists
                        .iter()
                        .map(|l| go_v(&Value::Array(l.to_vec())))
                        .collect();
                    return Err(other(format!(
                        "list element types are not identical: [{}]",
                        all.join(" ")
                    )));
                }
                Some(_) => {}
            }
        }
    }
    prev.ok_or_else(|| other("no elements in any of the given slices"))
}

/// The merge key's value of a list item (`nil` when absent or not a map),
/// as upstream's `index` reads it.
fn key_of<'a>(item: &'a Value, merge_key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    match item {
        Value::Object(m) => m.get(merge_key).unwrap_or(&NULL),
        _ => &NULL,
    }
}

/// `index`: position of `v` in `list` (by merge key for maps), or `None`.
fn index(list: &[Value], v: &Value, merge_key: &str, kind: GoKind) -> Res<Option<usize>> {
    for (i, x) in list.iter().enumerate() {
        let equal = if kind == GoKind::Map {
            go_eq(key_of(v, merge_key), key_of(x, merge_key))?
        } else {
            go_eq(v, x)?
        };
        if equal {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// `findMapInSliceBasedOnKeyValue`: the first map whose merge key equals `value`.
fn find_map_in_slice(list: &[Value], key: &str, value: &Value) -> Res<Option<usize>> {
    for (i, v) in list.iter().enumerate() {
        let Value::Object(m) = v else {
            return Err(other(format!("value for key {i} is not a map")));
        };
        if let Some(x) = m.get(key) {
            if go_eq(x, value)? {
                return Ok(Some(i));
            }
        }
    }
    Ok(None)
}

/// `mergeSlice`.
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: &Schema,
    merge_key: &str,
    is_delete_list: bool,
) -> Res<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_type(&[&original, &patch])?;
    let (merged, patch, server_order) = if kind != GoKind::Map {
        if is_delete_list {
            return delete_from_slice(original, &patch);
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !contains(&merged, v)? {
                merged.push(v.clone());
            }
        }
        (merged, patch, original)
    } else {
        if merge_key.is_empty() {
            return Err(other(format!(
                "cannot merge lists without merge key for {}",
                schema.name()
            )));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let server_order = original.clone();
        let merged = merge_slice_without_special_elements(original, &patch, merge_key, schema)?;
        (merged, patch, server_order)
    };
    let (patch_items, server_only) = if merge_key.is_empty() {
        partition_primitives(merged, &patch)?
    } else {
        partition_maps(merged, &patch, merge_key)?
    };
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &server_order,
        merge_key,
        kind,
    )
}

/// `deleteFromSlice`: the parallel deletion list of a primitive list.
fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Res<Vec<Value>> {
    for v in to_delete {
        hashable(v)?;
    }
    let mut out = Vec::with_capacity(current.len());
    for v in current {
        hashable(&v)?;
        if !contains(to_delete, &v)? {
            out.push(v);
        }
    }
    Ok(out)
}

/// `mergeSliceWithSpecialElements`: applies `$patch` items; returns the new
/// original and the patch without them.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Res<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(SmpError::Panic(format!(
                "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                go_type_name(&v)
            )));
        };
        let Some(directive) = m.get(DIRECTIVE) else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some(DELETE) => {
                let Some(value) = m.get(merge_key) else {
                    return Err(err_no_merge_key(m, merge_key));
                };
                while let Some(i) = find_map_in_slice(&original, merge_key, value)? {
                    original.remove(i);
                }
            }
            Some(REPLACE) => replace = true,
            Some(MERGE) => {
                return Err(other("merging lists cannot yet be specified in the patch"));
            }
            _ => return Err(err_bad_patch_type(directive, m)),
        }
    }
    if replace {
        Ok((plain, Vec::new()))
    } else {
        Ok((original, plain))
    }
}

/// `mergeSliceWithoutSpecialElements`: merge items by key, append new ones
/// (as they are: nulls and directives inside a new item stay).
fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: &Schema,
) -> Res<Vec<Value>> {
    for v in patch {
        let Value::Object(m) = v else {
            return Err(SmpError::Panic(format!(
                "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                go_type_name(v)
            )));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        match find_map_in_slice(&original, merge_key, value)? {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut original[i]) else {
                    return Err(other(format!("value for key {i} is not a map")));
                };
                original[i] = Value::Object(merge_map(o, m.clone(), schema)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

/// `partitionPrimitivesByPresentInList`.
fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> Res<(Vec<Value>, Vec<Value>)> {
    for v in by {
        hashable(v)?;
    }
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    for v in merged {
        if contains(by, &v)? {
            inside.push(v);
        } else {
            outside.push(v);
        }
    }
    Ok((inside, outside))
}

/// `partitionMapsByPresentInList`.
fn partition_maps(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Res<(Vec<Value>, Vec<Value>)> {
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    for v in merged {
        let Value::Object(m) = &v else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        if find_map_in_slice(by, merge_key, value)?.is_some() {
            inside.push(v);
        } else {
            outside.push(v);
        }
    }
    Ok((inside, outside))
}

/// `validateMergeKeyInLists`.
fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]]) -> Res<()> {
    for list in lists {
        for item in list.iter() {
            let Value::Object(m) = item else {
                return Err(err_bad_arg_type(MAP_TYPE, item));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
    }
    Ok(())
}

/// `normalizeSliceOrder`: sorts `to_sort` by position in `order`; items
/// marked `$patch: delete` go last.
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: GoKind,
) -> Res<Vec<Value>> {
    let mut to_sort = to_sort;
    let mut to_delete = Vec::new();
    if kind == GoKind::Map {
        validate_merge_key_in_lists(merge_key, &[&to_sort, order])?;
        let (keep, del): (Vec<Value>, Vec<Value>) = to_sort
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some(DELETE));
        to_sort = keep;
        to_delete = del;
    }
    let positions = to_sort
        .iter()
        .map(|v| index(order, v, merge_key, kind))
        .collect::<Res<Vec<Option<usize>>>>()?;
    // Go's sort.SliceStable is an insertion sort for up to 20 items; with
    // upstream's comparator (an item not found in `order` is "less" than
    // anything) only this exact procedure gives the same order.
    let mut idx: Vec<usize> = (0..to_sort.len()).collect();
    let less = |a: usize, b: usize| match (positions[a], positions[b]) {
        (Some(x), Some(y)) => x < y,
        _ => true,
    };
    for i in 1..idx.len() {
        let mut j = i;
        while j > 0 && less(idx[j], idx[j - 1]) {
            idx.swap(j, j - 1);
            j -= 1;
        }
    }
    let mut slots: Vec<Option<Value>> = to_sort.into_iter().map(Some).collect();
    let mut out: Vec<Value> = idx.into_iter().filter_map(|i| slots[i].take()).collect();
    out.extend(to_delete);
    Ok(out)
}

/// `normalizeElementOrder`: patch items in patch order, server-only items in
/// server order, interleaved by `mergeSortedSlice`.
fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoKind,
) -> Res<Vec<Value>> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    merge_sorted_slice(server_only, patch, server_order, merge_key, kind)
}

/// `mergeSortedSlice`: a server-only item goes before a patch item only when
/// both are in the live list and it comes first there; so new items lead.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: GoKind,
) -> Res<Vec<Value>> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                let li = index(server_order, l, merge_key, kind)?;
                let ri = index(server_order, r, merge_key, kind)?;
                let left_first = matches!((li, ri), (Some(a), Some(b)) if a < b);
                if left_first {
                    out.extend(left.next());
                } else {
                    out.extend(right.next());
                }
            }
        }
    }
    Ok(out)
}

/// `validatePatchWithSetOrderList`: the patch's items appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_patch_with_set_order_list(
    patch: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Res<()> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch.iter().collect()
    } else {
        let mut keep = Vec::new();
        for v in patch {
            let Value::Object(m) = v else {
                return Err(err_bad_arg_type(MAP_TYPE, v));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some(DELETE) {
                keep.push(v);
            }
        }
        keep
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi].get(DIRECTIVE).is_some() && non_delete[pi].is_object() {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(non_delete[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(other(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            go_v(&Value::Array(patch.to_vec())),
            go_v(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

/// `mergeKeyValueEqual`.
fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Res<bool> {
    if merge_key.is_empty() {
        return go_eq(left, right);
    }
    let Value::Object(l) = left else {
        return Err(err_bad_arg_type(MAP_TYPE, left));
    };
    let Value::Object(r) = right else {
        return Err(err_bad_arg_type(MAP_TYPE, right));
    };
    let lv = l
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(l, merge_key))?;
    let rv = r
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(r, merge_key))?;
    go_eq(lv, rv)
}

/// `mergePatchIntoOriginal`: the `$setElementOrder/<field>` directives, each
/// with its field's patch list.
fn merge_patch_into_original(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: &Schema,
) -> Res<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(err_bad_arg_type(SLICE_TYPE, &order));
        };
        let field_key = extract_key(&key, SET_ELEMENT_ORDER)?;
        let original_list = match original.get(&field_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(v) => return Err(err_bad_arg_type(SLICE_TYPE, v)),
        };
        let patch_list = match patch.get(&field_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(v) => return Err(err_bad_arg_type(SLICE_TYPE, v)),
        };
        let (sub, field) = schema.lookup_slice(&field_key).map_err(SmpError::Other)?;
        let strategy = patch_strategy(&field.strategies)?;
        let merge_key = field.merge_key.as_str();
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            &order,
            merge_key,
        )?;

        let original_values = original_list.clone().unwrap_or_default();
        let patch_values = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(a)) => a,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(o, p, &sub, &strategy, merge_key, false)?,
            (None, None) => continue,
        };
        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives(merged, &order)?
        } else {
            partition_maps(merged, &order, merge_key)?
        };
        let kind = slice_element_type(&[&original_values, &patch_values])?;
        let both = normalize_element_order(
            patch_items,
            server_only,
            &order,
            &original_values,
            merge_key,
            kind,
        )?;
        original.insert(field_key.clone(), Value::Array(both));
        patch.remove(&field_key);
    }
    Ok(())
}
