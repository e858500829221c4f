//! YAML (and JSON, which is YAML) documents as JSON values, with errors
//! that cannot carry what the documents hold: a machine config holds
//! tokens and CA keys, and a parser's message may quote the text it choked
//! on. Pure.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

/// At most this many documents in one stream (a machine config has a few
/// dozen).
pub const MAX_DOCUMENTS: usize = 1024;

/// Flow collections (`[`, `{`) nested deeper than this are refused before
/// parsing: the parser takes quadratic time on deep flow nesting, and the
/// deserializer stops at 128 levels anyway.
pub const MAX_FLOW_DEPTH: usize = 256;

/// The deepest flow nesting of `text`, quoted scalars skipped (roughly:
/// enough to bound the parser's work, not to parse).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut most, mut quote) = (0usize, 0usize, None::<char>);
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    most = most.max(depth);
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                '\n' => {}
                _ => {}
            },
        }
    }
    most
}

/// A document as JSON, refusing a mapping key that appears twice (Talos's
/// YAML decoder refuses it: "mapping key … already defined").
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.insert(k, v).is_some() {
                return Err(de::Error::custom("a mapping key appears twice"));
            }
        }
        Ok(Value::Object(out))
    }
}

/// A sysctl value's text as Talos's decoder gives it to a Go string: the
/// scalar as written (`0x10`, `1.50`, `True`), a plain null as nothing.
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Opt;
        impl<'de> Visitor<'de> for Opt {
            type Value = Option<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                String::deserialize(d).map(Some)
            }
        }
        d.deserialize_option(Opt).map(Text)
    }
}

/// The sysctl-bearing maps of a document, each value's text.
#[derive(Deserialize)]
struct TextDoc {
    machine: Option<TextMachine>,
    params: Option<BTreeMap<String, Text>>,
}

#[derive(Deserialize)]
struct TextMachine {
    sysctls: Option<BTreeMap<String, Text>>,
}

/// Puts the written text of every sysctl value in place of the parsed
/// scalar: Talos decodes `machine.sysctls` and a `SysctlConfig`'s `params`
/// into `map[string]string`, which keeps `0x10` as "0x10", where JSON would
/// hold 16.
fn with_texts(doc: &mut Value, texts: TextDoc) {
    let put = |map: Option<&mut Value>, texts: Option<BTreeMap<String, Text>>| {
        if let (Some(Value::Object(m)), Some(texts)) = (map, texts) {
            for (k, t) in texts {
                if let (Some(v), Text(Some(t))) = (m.get_mut(&k), t) {
                    if !v.is_object() && !v.is_array() {
                        *v = Value::String(t);
                    }
                }
            }
        }
    };
    if doc.get("kind").is_none() {
        put(
            doc.pointer_mut("/machine/sysctls"),
            texts.machine.and_then(|m| m.sysctls),
        );
    } else {
        put(doc.get_mut("params"), texts.params);
    }
}

/// The documents of a YAML stream, empty ones (`---` alone) skipped.
/// A mapping key twice is refused, and sysctl values keep the text they
/// are written with, as in Talos. Errors name only the position and, when
/// it quotes nothing, the parser's reason.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(format!("nested deeper than {MAX_FLOW_DEPTH} levels"));
    }
    let mut out = Vec::new();
    // The second stream reads the same documents for the sysctl texts
    // only; a document it cannot type keeps the values of the first.
    let mut texts = serde_yaml_ng::Deserializer::from_str(text);
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        let Strict(mut v) = Strict::deserialize(de).map_err(|e| redacted(&e))?;
        if let Some(Ok(t)) = texts.next().map(TextDoc::deserialize) {
            with_texts(&mut v, t);
        }
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

    /// As Talos (machinery v1.12.0 and v1.13.9, tests/talos_oracle.rs):
    /// a sysctl value is the text written, a repeated key is refused.
    #[test]
    fn sysctl_values_keep_their_text_and_keys_are_unique() {
        let d = documents(
            "version: v1alpha1\nmachine:\n  sysctls:\n    a: 0x10\n    b: 1.50\n    c: True\n    d: ~\n    e: '012'\n    f: +1\n  other: 0x10\n---\napiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  g: 1e3\n",
        )
        .unwrap();
        let s = &d[0]["machine"]["sysctls"];
        for (k, want) in [
            ("a", "0x10"),
            ("b", "1.50"),
            ("c", "True"),
            ("e", "012"),
            ("f", "+1"),
        ] {
            assert_eq!(s[k], want, "{k}");
        }
        assert_eq!(s["d"], Value::Null);
        assert_eq!(d[0]["machine"]["other"], 16);
        assert_eq!(d[1]["params"]["g"], "1e3");
        let e = documents("a: 1\nb:\n  c: SECRET\n  c: SECRET\n").unwrap_err();
        assert!(e.contains("twice") && !e.contains("SECRET"), "{e}");
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        assert_eq!(
            documents(&deep).unwrap_err(),
            "nested deeper than 256 levels"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // Brackets inside quoted scalars do not count.
        let quoted = format!("a: \"{}\"\nb: '{}'\n", "[".repeat(1000), "{".repeat(1000));
        assert_eq!(documents(&quoted).unwrap().len(), 1);
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
