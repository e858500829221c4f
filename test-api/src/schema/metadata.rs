//! ObjectMeta validation on create, as kube-apiserver runs it before the
//! schema (kubernetes/apimachinery v0.32.0 `pkg/api/validation/objectmeta.go`
//! `ValidateObjectMetaAccessor`, `pkg/util/validation/validation.go`,
//! `pkg/apis/meta/v1/validation/validation.go` `ValidateLabels`). Names are
//! DNS subdomains (`NameIsDNSSubdomain`, as for custom resources and Nodes).
//! Not checked: ownerReferences, finalizers, managedFields; the update rules
//! (immutable name/namespace/uid, resourceVersion) belong to the store.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use super::errors::{BadValue, ErrorType, FieldError};

const QNAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QNAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// The four constant patterns, anchored. They are constants: if one failed
/// to compile it would match nothing, and this file's tests would fail.
struct Patterns {
    qname: Option<Regex>,
    label_value: Option<Regex>,
    dns_label: Option<Regex>,
    dns_subdomain: Option<Regex>,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |f: &str| Regex::new(&format!("^{f}$")).ok();
        Patterns {
            qname: re(QNAME_FMT),
            label_value: re(LABEL_VALUE_FMT),
            dns_label: re(DNS_LABEL_FMT),
            dns_subdomain: re(DNS_SUBDOMAIN_FMT),
        }
    })
}

fn matches(re: &Option<Regex>, v: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(v))
}

/// `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

pub(crate) fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches(&patterns().dns_subdomain, v) {
        errs.push(regex_error(
            DNS_SUBDOMAIN_MSG,
            DNS_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches(&patterns().dns_label, v) {
        if matches(&patterns().dns_subdomain, v) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS_LABEL_MSG,
                DNS_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsQualifiedName`.
pub(crate) fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches(&patterns().qname, name) {
        errs.push(format!(
            "name part {}",
            regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches(&patterns().label_value, v) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn invalid(field: &str, v: &str, msg: String) -> FieldError {
    FieldError::new(
        ErrorType::Invalid,
        field,
        BadValue::Json(Value::String(v.to_string())),
        msg,
    )
}

fn str_at<'a>(meta: Option<&'a Value>, key: &str) -> &'a str {
    meta.and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `ValidateObjectMetaAccessor(meta, namespaced, NameIsDNSSubdomain, "metadata")`.
pub fn validate_object_meta(meta: Option<&Value>, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate = str_at(meta, "generateName");
    if !generate.is_empty() {
        // maskTrailingDash: a generateName may end in '-'.
        let masked = if generate.len() > 1 && generate.ends_with('-') {
            format!("{}a", &generate[..generate.len() - 2])
        } else {
            generate.to_string()
        };
        for m in dns1123_subdomain(&masked) {
            errs.push(invalid("metadata.generateName", generate, m));
        }
    }
    let name = str_at(meta, "name");
    if name.is_empty() {
        errs.push(FieldError::new(
            ErrorType::Required,
            "metadata.name",
            BadValue::Omitted,
            "name or generateName is required".into(),
        ));
    } else {
        for m in dns1123_subdomain(name) {
            errs.push(invalid("metadata.name", name, m));
        }
    }
    let ns = str_at(meta, "namespace");
    if namespaced {
        if ns.is_empty() {
            errs.push(FieldError::new(
                ErrorType::Required,
                "metadata.namespace",
                BadValue::Omitted,
                String::new(),
            ));
        } else {
            for m in dns1123_label(ns) {
                errs.push(invalid("metadata.namespace", ns, m));
            }
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::new(
            ErrorType::Forbidden,
            "metadata.namespace",
            BadValue::Omitted,
            "not allowed on this type".into(),
        ));
    }
    if let Some(g) = meta
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
    {
        if g < 0 {
            errs.push(FieldError::new(
                ErrorType::Invalid,
                "metadata.generation",
                BadValue::Json(Value::from(g)),
                "must be greater than or equal to 0".into(),
            ));
        }
    }
    if let Some(labels) = meta
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (k, v) in labels {
            for m in qualified_name(k) {
                errs.push(invalid("metadata.labels", k, m));
            }
            let v = v.as_str().unwrap_or_default();
            for m in label_value(v) {
                errs.push(invalid("metadata.labels", v, m));
            }
        }
    }
    if let Some(ann) = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let mut size = 0;
        for (k, v) in ann {
            // Case does not matter in annotation keys.
            for m in qualified_name(&k.to_lowercase()) {
                errs.push(invalid("metadata.annotations", k, m));
            }
            size += k.len() + v.as_str().map_or(0, str::len);
        }
        if size > ANNOTATIONS_LIMIT {
            errs.push(FieldError::new(
                ErrorType::TooLong,
                "metadata.annotations",
                BadValue::Omitted,
                format!("may not be more than {ANNOTATIONS_LIMIT} bytes"),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(meta: Value, namespaced: bool) -> Vec<String> {
        validate_object_meta(Some(&meta), namespaced)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn object_meta_texts() {
        assert!(msgs(
            json!({"name": "m1", "namespace": "default", "labels": {"a.b/c": "d", "e": ""}}),
            true
        )
        .is_empty());
        assert_eq!(
            msgs(json!({"namespace": "default"}), true),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert!(
            msgs(json!({"generateName": "m-", "namespace": "d"}), true).len() == 1,
            "only the missing name"
        );
        assert_eq!(
            msgs(json!({"name": "Bad_Name", "namespace": "default"}), true),
            vec!["metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
        );
        assert_eq!(
            msgs(json!({"name": "n"}), true),
            vec!["metadata.namespace: Required value"]
        );
        assert_eq!(
            msgs(json!({"name": "n", "namespace": "x"}), false),
            vec!["metadata.namespace: Forbidden: not allowed on this type"]
        );
        assert_eq!(
            msgs(json!({"name": "n", "namespace": "a.b"}), true),
            vec!["metadata.namespace: Invalid value: \"a.b\": must not contain dots"]
        );
        assert_eq!(
            msgs(json!({"name": "n", "labels": {"bad key": "v"}}), false),
            vec!["metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]
        );
        assert_eq!(
            msgs(json!({"name": "n", "labels": {"k": "-v"}}), false),
            vec!["metadata.labels: Invalid value: \"-v\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]
        );
        assert_eq!(
            msgs(json!({"name": "n", "annotations": {"/x": "1"}}), false),
            vec!["metadata.annotations: Invalid value: \"/x\": prefix part must be non-empty"]
        );
        assert!(msgs(
            json!({"name": "n", "annotations": {"Example.COM/Key": "v"}}),
            false
        )
        .is_empty());
        assert_eq!(
            msgs(
                json!({"name": "n", "annotations": {"a": "x".repeat(256 * 1024)}}),
                false
            ),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }
}
