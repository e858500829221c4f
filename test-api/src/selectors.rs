//! Label and field selectors as kube-apiserver parses them for list and watch
//! (k8s.io/apimachinery `pkg/labels/selector.go`, `pkg/fields/selector.go`, v1.32):
//! labels take `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`;
//! fields take `f=v`, `f==v`, `f!=v` on the fields a kind supports.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector(Vec<LabelReq>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// Splits at commas that are not inside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError(format!(
                        "unable to parse requirement: unexpected ')' in {s:?}"
                    )));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!(
            "unable to parse requirement: unclosed '(' in {s:?}"
        )));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_key(k: &str) -> Result<String, SelectorError> {
    let k = k.trim();
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(k.to_string())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label key {k:?}"
        )))
    }
}

fn check_value(v: &str) -> Result<String, SelectorError> {
    let v = v.trim();
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label value {v:?}"
        )))
    }
}

fn parse_set(rest: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            SelectorError(format!(
                "unable to parse requirement: expected a set in parentheses, found {rest:?}"
            ))
        })?;
    inner.split(',').map(check_value).collect()
}

/// Finds ` in ` / ` notin ` as a word after the key.
fn split_word<'a>(s: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let t = s.trim();
    let key_end = t.find(|c: char| c.is_whitespace())?;
    let (k, rest) = t.split_at(key_end);
    let rest = rest.trim_start();
    rest.strip_prefix(word)
        .filter(|r| r.starts_with(|c: char| c.is_whitespace() || c == '('))
        .map(|r| (k, r))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top(s)? {
            let p = part.trim();
            if p.is_empty() {
                return Err(SelectorError(format!(
                    "unable to parse requirement: empty requirement in {s:?}"
                )));
            }
            let req = if let Some((k, rest)) = split_word(p, "notin") {
                LabelReq::NotIn(check_key(k)?, parse_set(rest)?)
            } else if let Some((k, rest)) = split_word(p, "in") {
                LabelReq::In(check_key(k)?, parse_set(rest)?)
            } else if let Some((k, v)) = p.split_once("!=") {
                LabelReq::NotEq(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = p.split_once("==") {
                LabelReq::Eq(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = p.split_once('=') {
                LabelReq::Eq(check_key(k)?, check_value(v)?)
            } else if let Some(k) = p.strip_prefix('!') {
                LabelReq::NotExists(check_key(k)?)
            } else {
                LabelReq::Exists(check_key(p)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector(Vec<FieldReq>);

/// Fields every kind supports (`generic.ObjectMetaFieldsSet`) plus the
/// per-kind ones kubectl and controllers use here.
fn field_value(obj: &Value, field: &str) -> Option<String> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_string);
    match field {
        "metadata.name" => s("/metadata/name"),
        "metadata.namespace" => Some(s("/metadata/namespace").unwrap_or_default()),
        "spec.unschedulable" => Some(
            obj.pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
        ),
        "type" => s("/type"),
        "involvedObject.name" => s("/involvedObject/name"),
        "involvedObject.kind" => s("/involvedObject/kind"),
        "involvedObject.namespace" => s("/involvedObject/namespace"),
        "reason" => s("/reason"),
        _ => None,
    }
}

fn field_supported(field: &str) -> bool {
    matches!(
        field,
        "metadata.name"
            | "metadata.namespace"
            | "spec.unschedulable"
            | "type"
            | "involvedObject.name"
            | "involvedObject.kind"
            | "involvedObject.namespace"
            | "reason"
    )
}

impl FieldSelector {
    /// `kind` is only used in the error text, which follows kube-apiserver's
    /// `field label not supported: X`.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let p = part.trim();
            let (field, value, equal) = if let Some((f, v)) = p.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, v, true)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let field = field.trim();
            if !field_supported(field) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            reqs.push(FieldReq {
                field: field.to_string(),
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let v = field_value(obj, &r.field).unwrap_or_default();
            (v == r.value) == r.equal
        })
    }

    /// The value of an equality requirement on `metadata.name`, used by the
    /// Node authorizer's selector-restricted mode.
    pub fn name_equals(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equal && r.field == "metadata.name")
            .map(|r| r.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_equality_and_sets() {
        let o = obj(json!({"a": "1", "b": "x"}));
        for (sel, want) in [
            ("", true),
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("a=2", false),
            ("c!=1", true),
            ("a in (1,2)", true),
            ("a in (2,3)", false),
            ("a notin (2,3)", true),
            ("c notin (2)", true),
            ("b notin (x)", false),
            ("a", true),
            ("!a", false),
            ("!c", true),
            ("a=1,b in (x, y),!c", true),
            ("a=1,b=y", false),
        ] {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        for sel in ["a in (1", "a=1,", "a=b c", "in (x)x)"] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=n1")
            .unwrap()
            .matches(&o));
        assert!(!FieldSelector::parse("metadata.name!=n1")
            .unwrap()
            .matches(&o));
        assert!(
            FieldSelector::parse("metadata.namespace==ns,metadata.name=n1")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.nope=1").unwrap_err().0,
            "field label not supported: spec.nope"
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=n1")
                .unwrap()
                .name_equals(),
            Some("n1")
        );
    }
}
