//! The checks kube-apiserver runs on a custom resource, with its messages:
//! the OpenAPI schema validator (kubernetes/kube-openapi `pkg/validation/validate`,
//! messages from `pkg/validation/errors/schema.go`, mapped to field errors by
//! kubernetes/apiextensions-apiserver `pkg/apiserver/validation/validation.go`
//! `kubeOpenAPIResultToFieldErrors`, v0.32.0), then list-type uniqueness
//! (`pkg/apiserver/schema/listtype/validation.go`), then the CEL rules
//! (`pkg/registry/customresource/strategy.go` `Validate`: skipped with one
//! extra cause when an earlier error blocks them).
//!
//! Paths: kube-openapi names map keys with a dot (`metadata.labels.a`), the
//! list-type and CEL passes use field.Path (`metadata.labels[a]`), as upstream.

use serde_json::{Map, Value};

use super::cel::{self, RuleOutcome};
use super::errors::{BadValue, ErrorType, FieldError};
use super::structural::{join, Schema};

/// The OpenAPI pass, in kube-openapi's validator order: type, string,
/// format, number, array (items first), enum, object.
pub(crate) fn openapi(v: &Value, s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    if v.is_null() {
        // Only the type and enum validators look at a null.
        if !s.nullable && (s.ty.is_some() || s.int_or_string) {
            errs.push(type_error(path, &types(s).join(","), "null"));
        }
        check_enum(v, s, path, errs);
        return;
    }
    if let Some(e) = type_check(v, s, path) {
        errs.push(e);
    }
    if let Value::String(st) = v {
        // The string validator stops at its first failure.
        let chars = st.chars().count() as u64;
        if let Some(max) = s.max_length.filter(|m| chars > *m) {
            errs.push(FieldError::new(
                ErrorType::TooLong,
                path,
                BadValue::Omitted,
                format!("may not be more than {max} bytes"),
            ));
        } else if let Some(min) = s.min_length.filter(|m| chars < *m) {
            errs.push(invalid(
                path,
                v.clone(),
                format!("{path} in body should be at least {min} chars long"),
            ));
        } else if let (Some(p), Some(re)) = (&s.pattern, &s.pattern_re) {
            if !re.is_match(st) {
                errs.push(invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should match '{p}'"),
                ));
            }
        }
        // Of the formats kube-apiserver keeps, the stored CRDs use only date-time.
        if supported_format(s) == Some("datetime") && !is_date_time(st) {
            errs.push(FieldError::new(
                ErrorType::TypeInvalid,
                path,
                BadValue::Json(v.clone()),
                format!(
                    "{path} in body must be of type {}: {}",
                    s.format.as_deref().unwrap_or_default(),
                    super::errors::go_quote(st)
                ),
            ));
        }
    }
    if let Value::Number(num) = v {
        let x = num.as_f64().unwrap_or(0.0);
        if let Some(min) = s.minimum {
            let bad = if s.exclusive_minimum {
                x <= min
            } else {
                x < min
            };
            if bad {
                let op = if s.exclusive_minimum {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                errs.push(invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be {op} {}", go_float(min)),
                ));
            }
        }
        if let Some(max) = s.maximum {
            let bad = if s.exclusive_maximum {
                x >= max
            } else {
                x > max
            };
            if bad {
                let op = if s.exclusive_maximum {
                    "less than"
                } else {
                    "less than or equal to"
                };
                errs.push(invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be {op} {}", go_float(max)),
                ));
            }
        }
    }
    if let Value::Array(a) = v {
        if let Some(items) = s.items.as_deref() {
            for (i, item) in a.iter().enumerate() {
                openapi(item, items, &format!("{path}[{i}]"), errs);
            }
        }
        let n = a.len() as u64;
        if let Some(min) = s.min_items.filter(|m| n < *m) {
            errs.push(invalid(
                path,
                Value::from(n),
                format!("{path} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = s.max_items.filter(|m| n > *m) {
            errs.push(FieldError::new(
                ErrorType::TooMany,
                path,
                BadValue::Count(n),
                format!("must have at most {max} items"),
            ));
        }
    }
    check_enum(v, s, path, errs);
    if let Value::Object(m) = v {
        object(m, s, path, errs);
    }
}

fn check_enum(v: &Value, s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    let Some(values) = &s.enum_values else {
        return;
    };
    if values.is_empty() || values.contains(v) {
        return;
    }
    let allowed: Vec<String> = values
        .iter()
        .map(|a| match a {
            Value::String(s) => super::errors::go_quote(s),
            other => super::errors::go_quote(&other.to_string()),
        })
        .collect();
    errs.push(FieldError::new(
        ErrorType::NotSupported,
        path,
        BadValue::Json(v.clone()),
        format!("supported values: {}", allowed.join(", ")),
    ));
}

fn object(m: &Map<String, Value>, s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    let n = m.len() as u64;
    if let Some(min) = s.min_properties.filter(|x| n < *x) {
        errs.push(invalid(
            path,
            Value::from(n),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = s.max_properties.filter(|x| n > *x) {
        errs.push(FieldError::new(
            ErrorType::TooMany,
            path,
            BadValue::Count(n),
            format!("must have at most {max} items"),
        ));
    }
    // Map values, then properties, then required: kube-openapi's order.
    if let Some(a) = s.additional_schema() {
        for (k, child) in m.iter().filter(|(k, _)| !s.properties.contains_key(*k)) {
            openapi(child, a, &join(path, k), errs);
        }
    }
    for (k, p) in &s.properties {
        if let Some(child) = m.get(k) {
            openapi(child, p, &join(path, k), errs);
        }
    }
    for r in &s.required {
        if !m.contains_key(r) {
            errs.push(FieldError::new(
                ErrorType::Required,
                &join(path, r),
                BadValue::Omitted,
                String::new(),
            ));
        }
    }
}

/// The formats kube-apiserver keeps in a CRD schema (others, e.g. int32 and
/// int64, are dropped: apiextensions-apiserver `pkg/apiserver/validation/formats.go`),
/// normalised without dashes.
fn supported_format(s: &Schema) -> Option<&'static str> {
    const SUPPORTED: &[&str] = &[
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
    ];
    let f = s.format.as_deref()?.replace('-', "");
    SUPPORTED.iter().find(|x| **x == f).copied()
}

fn types(s: &Schema) -> Vec<&str> {
    if s.int_or_string {
        vec!["integer", "string"]
    } else {
        s.ty.as_deref().into_iter().collect()
    }
}

/// kube-openapi's type validator (`pkg/validation/validate/type.go`), quirks
/// kept: a string-typed field with a format accepts any string or array here.
fn type_check(v: &Value, s: &Schema, path: &str) -> Option<FieldError> {
    let types = types(s);
    let format = supported_format(s).map(|_| s.format.as_deref().unwrap_or_default());
    if types.is_empty() && format.is_none() {
        return None;
    }
    // The JSON type and Go format of the decoded value.
    let (sch, fmt) = match v {
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.is_f64() => ("number", "float64"),
        Value::Number(_) => ("integer", "int64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
        Value::Null => ("null", ""),
    };
    let has = |t: &str| types.contains(&t);
    let is_float_int =
        sch == "number" && v.as_f64().is_some_and(|f| f.fract() == 0.0) && has("integer");
    let is_int_float = sch == "integer" && has("number");
    let stringish = v.is_string() || v.is_array();
    if let Some(f) = format {
        if !(stringish || has(sch) || fmt == f || is_float_int || is_int_float) {
            return Some(type_error(path, f, fmt));
        }
        if !(has("number") || has("integer")) && stringish {
            return None;
        }
    }
    if types.is_empty() || has(sch) || is_float_int || is_int_float {
        return None;
    }
    Some(type_error(path, &types.join(","), sch))
}

fn type_error(path: &str, want: &str, got: &str) -> FieldError {
    FieldError::new(
        ErrorType::TypeInvalid,
        path,
        BadValue::Json(Value::String(got.to_string())),
        format!(
            "{path} in body must be of type {want}: {}",
            super::errors::go_quote(got)
        ),
    )
}

fn invalid(path: &str, v: Value, detail: String) -> FieldError {
    FieldError::new(ErrorType::Invalid, path, BadValue::Json(v), detail)
}

fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// go-openapi strfmt `IsDateTime`: an RFC 3339 full-date, `T` (any case),
/// `hh:mm:ss`, optional fraction, `Z` or `±hh:mm`.
pub(crate) fn is_date_time(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if s.len() < 4 || !is_full_date(date) {
        return false;
    }
    let b = time.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| x.iter().all(u8::is_ascii_digit))
    };
    if b.len() < 9
        || !digits(0..2)
        || b[2] != b':'
        || !digits(3..5)
        || b[5] != b':'
        || !digits(6..8)
    {
        return false;
    }
    if &time[0..2] > "23" || &time[3..5] > "59" || &time[6..8] > "59" {
        return false;
    }
    let mut rest = &time[8..];
    // `(.[0-9]+)?`: the pattern's `.` is any character.
    if rest.len() > 1 && !rest.starts_with('z') && !rest.starts_with('+') && !rest.starts_with('-')
    {
        let after = &rest[rest.char_indices().nth(1).map_or(rest.len(), |(i, _)| i)..];
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &after[n..];
    }
    if rest == "z" {
        return true;
    }
    let z = rest.as_bytes();
    z.len() == 6
        && (z[0] == b'+' || z[0] == b'-')
        && z[1..3].iter().all(u8::is_ascii_digit)
        && z[3] == b':'
        && z[4..6].iter().all(u8::is_ascii_digit)
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_full_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    let (Some(y), Some(mo), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// The list-type pass: `x-kubernetes-list-type: map` keys and `set` items unique.
pub(crate) fn list_types(v: &Value, s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    match v {
        Value::Object(m) => {
            let addl = s.additional_schema();
            for (k, child) in m {
                if let Some(p) = s.properties.get(k) {
                    list_types(child, p, &join(path, k), errs);
                } else if let Some(a) = addl {
                    list_types(child, a, &format!("{path}[{k}]"), errs);
                }
            }
        }
        Value::Array(a) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in first_repeats(a.iter().cloned()) {
                        errs.push(FieldError::new(
                            ErrorType::Duplicate,
                            &format!("{path}[{i}]"),
                            BadValue::Json(a[i].clone()),
                            String::new(),
                        ));
                    }
                }
                Some("map") => list_map(a, s, path, errs),
                _ => {}
            }
            if let Some(items) = s.items.as_deref() {
                for (i, item) in a.iter().enumerate() {
                    list_types(item, items, &format!("{path}[{i}]"), errs);
                }
            }
        }
        _ => {}
    }
}

fn list_map(a: &[Value], s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    for (i, x) in a.iter().enumerate() {
        if !x.is_object() && !x.is_null() {
            errs.push(invalid(
                &format!("{path}[{i}]"),
                x.clone(),
                "must be an object for an array of list-type map".into(),
            ));
            return;
        }
    }
    // The key of an item: its key fields that are set (an unset key is a value too).
    let keys: Vec<Value> = a
        .iter()
        .map(|x| {
            let mut k = Map::new();
            if let Value::Object(m) = x {
                for f in &s.list_map_keys {
                    if let Some(v) = m.get(f) {
                        k.insert(f.clone(), v.clone());
                    }
                }
            }
            Value::Object(k)
        })
        .collect();
    for i in first_repeats(keys.iter().cloned()) {
        errs.push(FieldError::new(
            ErrorType::Duplicate,
            &format!("{path}[{i}]"),
            BadValue::Json(keys[i].clone()),
            String::new(),
        ));
    }
}

/// Indices of each value's second occurrence (upstream reports a repeated
/// value once, at the first repeat).
fn first_repeats(items: impl Iterator<Item = Value>) -> Vec<usize> {
    let mut seen: Vec<(Value, u32)> = Vec::new();
    let mut out = Vec::new();
    for (i, x) in items.enumerate() {
        match seen.iter_mut().find(|(v, _)| *v == x) {
            Some((_, n)) => {
                *n += 1;
                if *n == 2 {
                    out.push(i);
                }
            }
            None => seen.push((x, 1)),
        }
    }
    out
}

/// The CEL pass over the rules this crate evaluates (see `cel`).
pub(crate) fn cel_rules(v: &Value, s: &Schema, path: &str, errs: &mut Vec<FieldError>) {
    if v.is_null() {
        return;
    }
    for r in s.validations.iter().filter(|r| r.plain()) {
        if let RuleOutcome::Failed = cel::evaluate(&r.rule, v) {
            let msg = match &r.message {
                Some(m) if !m.is_empty() => m.clone(),
                _ => format!("failed rule: {}", r.rule),
            };
            // Upstream's bad value is the schema's type name, not the value.
            let ty = s.ty.clone().unwrap_or_default();
            errs.push(invalid(path, Value::String(ty), msg));
        }
    }
    match v {
        Value::Object(m) => {
            let addl = s.additional_schema();
            for (k, child) in m {
                if let Some(p) = s.properties.get(k) {
                    cel_rules(child, p, &join(path, k), errs);
                } else if let Some(a) = addl {
                    cel_rules(child, a, &format!("{path}[{k}]"), errs);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, item) in a.iter().enumerate() {
                    cel_rules(item, items, &format!("{path}[{i}]"), errs);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_times_as_strfmt_reads_them() {
        for ok in [
            "2026-12-01T21:00:00Z",
            "2026-12-01t21:00:00z",
            "2026-12-01T21:00:00.123456Z",
            "2026-12-01T21:00:00+01:00",
            "2024-02-29T00:00:00Z",
        ] {
            assert!(is_date_time(ok), "{ok}");
        }
        for bad in [
            "",
            "yesterday",
            "2026-12-01",
            "2026-12-01T25:00:00Z",
            "2026-12-01T21:00:00",
            "2025-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-12-01T21:00:00.Z",
        ] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }
}
