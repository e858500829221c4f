//! YAML (and JSON, which is YAML) documents as JSON values, with errors
//! that cannot carry what the documents hold: a machine config holds
//! tokens and CA keys, and a parser's message may quote the text it choked
//! on. Pure.

use serde::Deserialize;
use serde_json::Value;

/// At most this many documents in one stream (a machine config has a few
/// dozen).
pub const MAX_DOCUMENTS: usize = 1024;

/// The documents of a YAML stream, empty ones (`---` alone) skipped.
/// Errors name only the position and, when it quotes nothing, the
/// parser's reason.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        let v = Value::deserialize(de).map_err(|e| redacted(&e))?;
        if !v.is_null() {
            out.push(v);
        }
        if out.len() > MAX_DOCUMENTS {
            return Err(format!("more than {MAX_DOCUMENTS} documents"));
        }
    }
    Ok(out)
}

/// A YAML error without any quoted input: the parser's reason only when it
/// holds no quote or backtick (which would enclose document text).
fn redacted(e: &serde_yaml_ng::Error) -> String {
    let msg = e.to_string();
    // The message ends with " at line L column C" when located.
    let reason = msg.split(" at line ").next().unwrap_or("").trim();
    let reason = if reason.is_empty() || reason.contains(['"', '`', '\'']) {
        "not valid YAML"
    } else {
        reason
    };
    match e.location() {
        Some(l) => format!("{reason} at line {} column {}", l.line(), l.column()),
        None => reason.to_string(),
    }
}

/// A sysctl value as Talos decodes it into its `map[string]string`: the
/// scalar's text (`"11255"` and `11255` are the same string). `None` for a
/// mapping or a sequence.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn streams_json_and_scalars() {
        let d = documents("a: 1\n---\n---\nb: \"x\"\n").unwrap();
        assert_eq!(d.len(), 2);
        let d = documents(r#"{"kind": "List", "items": []}"#).unwrap();
        assert_eq!(d[0]["kind"], "List");
        let s = documents("k: 11255\nq: \"11255\"\nb: true\nf: 1.5\n").unwrap();
        for (k, want) in [("k", "11255"), ("q", "11255"), ("b", "true"), ("f", "1.5")] {
            assert_eq!(scalar_text(&s[0][k]).as_deref(), Some(want), "{k}");
        }
        assert_eq!(scalar_text(&serde_json::json!({"a": 1})), None);
    }

    #[test]
    fn errors_quote_nothing() {
        for bad in [
            "token: SECRET-MARKER\n  bad: [",
            "a: 'SECRET-MARKER\n",
            "- SECRET-MARKER\nkey: SECRET-MARKER",
            "? [SECRET-MARKER]\n: x\n",
            "a: &x SECRET-MARKER\nb: *y\n",
        ] {
            let e = documents(bad).unwrap_err();
            assert!(
                !e.contains("SECRET-MARKER") && !e.contains('\n'),
                "{bad:?}: {e}"
            );
        }
    }
}
