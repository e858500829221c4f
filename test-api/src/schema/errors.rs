//! Field errors and the 422 Status, rendered as kube-apiserver renders them:
//! `field.Error` (kubernetes/apimachinery `pkg/util/validation/field/errors.go`,
//! v0.32.0) and `errors.NewInvalid` (`pkg/api/errors/errors.go`, v0.32.0).

use std::fmt;

use serde_json::{json, Value};

/// `field.ErrorType`: the cause `reason` in the Status and the word in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    TypeInvalid,
    NotSupported,
    TooLong,
    TooMany,
    Duplicate,
    Forbidden,
}

impl ErrorType {
    /// The cause type (`metav1.CauseType`).
    pub fn cause_type(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Forbidden => "FieldValueForbidden",
        }
    }

    fn word(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Forbidden => "Forbidden",
        }
    }
}

/// The bad value of a field error, kept as Go would print it.
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    /// Not printed (Required, TooLong, Forbidden print no value).
    Omitted,
    /// A JSON value from the object: strings print quoted (`%q`), numbers and
    /// booleans plain (`%v`), null as `"null"`, objects and arrays as Go's `%#v`.
    Json(Value),
    /// A Go `int` (TooMany's count), printed by `%#v`: the number.
    Count(u64),
}

/// One `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    /// The field path, e.g. `status.conditions[0].reason` (`<nil>` for none).
    pub field: String,
    pub bad_value: BadValue,
    pub detail: String,
}

impl FieldError {
    pub(crate) fn new(kind: ErrorType, field: &str, bad_value: BadValue, detail: String) -> Self {
        FieldError {
            kind,
            field: field.to_string(),
            bad_value,
            detail,
        }
    }

    /// `ErrorBody()`: the message without the field, as put in a Status cause.
    pub fn error_body(&self) -> String {
        let mut s = match (self.kind, &self.bad_value) {
            (ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong, _)
            | (_, BadValue::Omitted) => self.kind.word().to_string(),
            (k, BadValue::Count(n)) => format!("{}: {n}", k.word()),
            (k, BadValue::Json(v)) => format!("{}: {}", k.word(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.error_body())
    }
}

/// A rejected custom-resource write: kube-apiserver's 422 `Invalid` Status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Invalid {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub causes: Vec<FieldError>,
}

impl Invalid {
    pub fn http_status(&self) -> u16 {
        422
    }

    /// `Kind.group "name" is invalid: CAUSE` or `…: [CAUSE, CAUSE]`: identical
    /// messages are shown once (`ErrorList.ToAggregate`), as upstream.
    pub fn message(&self) -> String {
        let qualified = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        let mut seen: Vec<String> = Vec::new();
        for c in &self.causes {
            let m = c.to_string();
            if !seen.contains(&m) {
                seen.push(m);
            }
        }
        let head = format!("{qualified} {} is invalid", go_quote(&self.name));
        match seen.len() {
            0 => head,
            1 => format!("{head}: {}", seen[0]),
            _ => format!("{head}: [{}]", seen.join(", ")),
        }
    }

    /// The `metav1.Status` body kube-apiserver sends with the 422.
    pub fn status(&self) -> Value {
        let causes: Vec<Value> = self
            .causes
            .iter()
            .map(|c| {
                json!({"reason": c.kind.cause_type(), "message": c.error_body(), "field": c.field})
            })
            .collect();
        let mut details = json!({"name": self.name, "kind": self.kind, "causes": causes});
        if !self.group.is_empty() {
            details["group"] = json!(self.group);
        }
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "reason": "Invalid",
            "details": details,
            "code": 422,
        })
    }
}

/// Go's `strconv.Quote` (what `%q` prints).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How `ErrorBody` prints a bad value that came from unstructured JSON.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        other => go_sharp_v(other),
    }
}

fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        // Go's %v for float64 is %g: shortest repr, exponent only when large.
        Some(f) if f.abs() >= 1e21 || (f != 0.0 && f.abs() < 1e-4) => {
            let s = format!("{f:e}");
            // Rust prints 1e21, Go 1e+21.
            match s.split_once('e') {
                Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e:0>2}"),
                Some((m, e)) => format!("{m}e-{:0>2}", &e[1..]),
                None => s,
            }
        }
        Some(f) => f.to_string(),
        None => n.to_string(),
    }
}

/// Go's `%#v` of an unstructured value (`map[string]interface {}{…}`).
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(m) => {
            // Go prints map keys sorted, as serde_json's map iterates.
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_sharp_v(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_print_as_go_does() {
        let e = FieldError::new(
            ErrorType::TooMany,
            "status.conditions",
            BadValue::Count(33),
            "must have at most 32 items".into(),
        );
        assert_eq!(
            e.to_string(),
            "status.conditions: Too many: 33: must have at most 32 items"
        );
        let d = FieldError::new(
            ErrorType::Duplicate,
            "status.conditions[1]",
            BadValue::Json(json!({"type": "Ready"})),
            String::new(),
        );
        assert_eq!(
            d.to_string(),
            "status.conditions[1]: Duplicate value: map[string]interface {}{\"type\":\"Ready\"}"
        );
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_value(&json!(1.5)), "1.5");
        assert_eq!(go_value(&json!(null)), "\"null\"");
    }
}
