//! Talos machine configuration documents: which sysctls they set, the
//! agent's `ExtensionServiceConfig`, and Talos's strategic merge of config
//! patches. Pure: JSON values in (see [`super::yaml`]), values or one-line
//! errors out. Errors name documents by kind and position and keys by
//! path, never by content: the documents hold secrets.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::yaml::scalar_text;

/// The `ExtensionServiceConfig` whose `environment` is the agent's.
pub const AGENT_SERVICE: &str = "sandbox-readiness";

/// Where in the documents a sysctl was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The v1alpha1 document's `machine.sysctls` (deprecated in 1.14).
    MachineSysctls,
    /// A `SysctlConfig` document's `params` (Talos ≥ 1.14).
    SysctlConfig,
}

impl Place {
    pub const fn as_str(self) -> &'static str {
        match self {
            Place::MachineSysctls => "machine.sysctls",
            Place::SysctlConfig => "SysctlConfig",
        }
    }
}

/// A document's identity for Talos's strategic merge: (apiVersion, kind,
/// name) for typed documents, one identity for the v1alpha1 document
/// (`pkg/machinery/config/configpatcher/strategic.go` at v1.14.0-rc.1).
pub fn identity(doc: &Value) -> String {
    match doc.get("kind").and_then(Value::as_str) {
        Some(kind) => format!(
            "{}/{kind}/{}",
            doc.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            doc.get("name").and_then(Value::as_str).unwrap_or("")
        ),
        None => "v1alpha1".into(),
    }
}

fn kind_shown(doc: &Value) -> String {
    match doc.get("kind") {
        Some(Value::String(k)) => format!("{:?}", k.chars().take(40).collect::<String>()),
        Some(_) => "a kind that is not a string".into(),
        None => "no kind".into(),
    }
}

/// Checks that `docs` are a Talos machine configuration as Talos's loader
/// would take them: the v1alpha1 document (`version: v1alpha1`) at most
/// once, every other document a `v1alpha1` kind at most once per name.
/// `what` names the documents in errors ("data").
pub fn check_machine_config(docs: &[Value], what: &str) -> Result<(), String> {
    if docs.is_empty() {
        return Err(format!("{what} holds no document"));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, doc) in docs.iter().enumerate() {
        let n = i + 1;
        if !doc.is_object() {
            return Err(format!(
                "{what} document {n} is not a mapping: not a Talos machine config"
            ));
        }
        match doc.get("kind") {
            None => {
                if doc.get("version").and_then(Value::as_str) != Some("v1alpha1") {
                    return Err(format!(
                        "{what} document {n} has neither `version: v1alpha1` nor a kind: not a Talos machine config"
                    ));
                }
            }
            Some(_) => {
                if doc.get("apiVersion").and_then(Value::as_str) != Some("v1alpha1") {
                    return Err(format!(
                        "{what} document {n} (kind {}) is not a Talos config document (apiVersion v1alpha1)",
                        kind_shown(doc)
                    ));
                }
            }
        }
        if !seen.insert(identity(doc)) {
            return Err(format!(
                "{what} document {n} (kind {}) appears twice",
                kind_shown(doc)
            ));
        }
    }
    Ok(())
}

/// The sysctls the documents set, as Talos merges them: the v1alpha1
/// `machine.sysctls` first, then the `SysctlConfig` document's `params`,
/// key by key, the later winning (`Container.SysctlConfig` in
/// siderolabs/talos `pkg/machinery/config/container/container.go` at
/// v1.14.0-rc.1, commit 7a84d742b3d5: "dedicated documents take precedence
/// over v1alpha1", merged by `config.WrapSysctlConfigList`).
pub fn sysctls(docs: &[Value]) -> Result<BTreeMap<String, (String, Place)>, String> {
    let mut out = BTreeMap::new();
    let v1 = docs.iter().filter(|d| d.get("kind").is_none());
    let typed = docs.iter().filter(|d| {
        d.get("kind").and_then(Value::as_str) == Some("SysctlConfig")
            && d.get("apiVersion").and_then(Value::as_str) == Some("v1alpha1")
    });
    for doc in v1 {
        if let Some(m) = doc.pointer("/machine/sysctls") {
            collect(m, Place::MachineSysctls, &mut out)?;
        }
    }
    for doc in typed {
        if let Some(m) = doc.get("params") {
            collect(m, Place::SysctlConfig, &mut out)?;
        }
    }
    Ok(out)
}

fn collect(
    map: &Value,
    place: Place,
    out: &mut BTreeMap<String, (String, Place)>,
) -> Result<(), String> {
    let what = place.as_str();
    let obj = match map {
        Value::Object(o) => o,
        Value::Null => return Ok(()),
        _ => return Err(format!("{what} is not a mapping")),
    };
    for (k, v) in obj {
        crate::sysctl_name::validate_name(k).map_err(|e| format!("{what}: {e}"))?;
        let text = scalar_text(v).ok_or_else(|| format!("{what}: {k} is not a scalar value"))?;
        if text.len() > crate::sysctl_name::MAX_VALUE_BYTES {
            return Err(format!("{what}: the value of {k} is too long"));
        }
        out.insert(k.clone(), (text, place));
    }
    Ok(())
}

/// The `environment` of the agent's `ExtensionServiceConfig`, if the
/// documents hold one.
pub fn agent_environment(docs: &[Value]) -> Result<Option<Vec<String>>, String> {
    let Some(doc) = docs.iter().find(|d| {
        d.get("kind").and_then(Value::as_str) == Some("ExtensionServiceConfig")
            && d.get("name").and_then(Value::as_str) == Some(AGENT_SERVICE)
    }) else {
        return Ok(None);
    };
    let env = match doc.get("environment") {
        None | Some(Value::Null) => return Ok(Some(Vec::new())),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(format!(
                "ExtensionServiceConfig {AGENT_SERVICE}: environment is not a list"
            ))
        }
    };
    env.iter()
        .enumerate()
        .map(|(i, e)| {
            e.as_str().map(str::to_string).ok_or_else(|| {
                format!("ExtensionServiceConfig {AGENT_SERVICE}: environment[{i}] is not a string")
            })
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// True when a patch value deletes what it lands on (`$patch: delete`).
fn is_delete(v: &Value) -> bool {
    v.get("$patch").and_then(Value::as_str) == Some("delete")
}

/// Talos's merge of one patch document into one document: mappings key by
/// key, sequences appended, scalars replaced, `$patch: delete` removes
/// (`pkg/machinery/config/merge` at v1.14.0-rc.1; only maps and scalars
/// matter for sysctls, which are `map[string]string`).
fn merge(left: &mut Value, right: &Value) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => merge_maps(l, r),
        (Value::Array(l), Value::Array(r)) => {
            l.extend(r.iter().filter(|v| !is_delete(v)).cloned());
        }
        (l, r) => *l = r.clone(),
    }
}

fn merge_maps(l: &mut Map<String, Value>, r: &Map<String, Value>) {
    for (k, v) in r {
        if k == "$patch" {
            continue;
        }
        if is_delete(v) {
            l.remove(k);
            continue;
        }
        match l.get_mut(k) {
            Some(existing) if !existing.is_null() => merge(existing, v),
            _ => {
                l.insert(k.clone(), strip_deletes(v));
            }
        }
    }
}

/// A value put where nothing was: delete markers inside it mean nothing.
fn strip_deletes(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| *k != "$patch" && !is_delete(v))
                .map(|(k, v)| (k.clone(), strip_deletes(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Talos's strategic merge of patch documents into a configuration:
/// documents with the same identity are merged, a `$patch: delete`
/// document removes its match, others are appended
/// (`configpatcher.StrategicMerge`, siderolabs/talos
/// `pkg/machinery/config/configpatcher/strategic.go` at v1.14.0-rc.1).
pub fn strategic_merge(docs: &mut Vec<Value>, patch: &[Value]) {
    for p in patch {
        let id = identity(p);
        let at = docs.iter().position(|d| identity(d) == id);
        match (at, is_delete(p)) {
            (Some(i), true) if p.get("kind").is_some() || only_delete(p) => {
                docs.remove(i);
            }
            (Some(i), _) => merge(&mut docs[i], p),
            (None, true) if p.get("kind").is_some() || only_delete(p) => {}
            (None, _) => docs.push(strip_deletes(p)),
        }
    }
}

/// `{"$patch": "delete"}` and nothing else.
fn only_delete(p: &Value) -> bool {
    p.as_object().is_some_and(|m| m.len() == 1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sysctl_config_wins_over_machine_sysctls_key_by_key() {
        let docs = vec![
            json!({"version": "v1alpha1", "machine": {"sysctls": {"a.b": "1", "c.d": 2}}}),
            json!({"apiVersion": "v1alpha1", "kind": "SysctlConfig", "params": {"a.b": "3", "e.f": "4"}}),
        ];
        check_machine_config(&docs, "data").unwrap();
        let s = sysctls(&docs).unwrap();
        let got: Vec<(&str, &str, &str)> = s
            .iter()
            .map(|(k, (v, p))| (k.as_str(), v.as_str(), p.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a.b", "3", "SysctlConfig"),
                ("c.d", "2", "machine.sysctls"),
                ("e.f", "4", "SysctlConfig")
            ]
        );
    }

    #[test]
    fn strategic_merge_as_talos_does() {
        let mut docs = vec![
            json!({"version": "v1alpha1", "machine": {"type": "worker", "sysctls": {"a.b": "1", "x.y": "9"}, "certSANs": ["a"]}}),
            json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}),
        ];
        strategic_merge(
            &mut docs,
            &[
                json!({"machine": {"sysctls": {"a.b": "2", "x.y": {"$patch": "delete"}}, "certSANs": ["b"]}}),
                json!({"apiVersion": "v1alpha1", "kind": "SysctlConfig", "params": {"c.d": "3"}}),
                json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "$patch": "delete"}),
            ],
        );
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["machine"]["sysctls"], json!({"a.b": "2"}));
        assert_eq!(docs[0]["machine"]["certSANs"], json!(["a", "b"]));
        assert_eq!(docs[1]["kind"], "SysctlConfig");
    }

    #[test]
    fn not_machine_configs_are_refused_without_content() {
        let cases = [
            (vec![], "holds no document"),
            (vec![json!("SECRET")], "not a mapping"),
            (
                vec![json!({"token": "SECRET"})],
                "neither `version: v1alpha1`",
            ),
            (
                vec![json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "SECRET"}})],
                "(kind \"Secret\") is not a Talos config document",
            ),
            (
                vec![
                    json!({"version": "v1alpha1"}),
                    json!({"version": "v1alpha1"}),
                ],
                "appears twice",
            ),
        ];
        for (docs, want) in cases {
            let e = check_machine_config(&docs, "data").unwrap_err();
            assert!(e.contains(want) && !e.contains("SECRET"), "{e}");
        }
        let bad = vec![json!({"version": "v1alpha1", "machine": {"sysctls": {"a.b": {"x": 1}}}})];
        assert_eq!(
            sysctls(&bad).unwrap_err(),
            "machine.sysctls: a.b is not a scalar value"
        );
    }

    #[test]
    fn the_agent_environment() {
        let docs = vec![
            json!({"apiVersion": "v1alpha1", "kind": "ExtensionServiceConfig", "name": "other", "environment": ["A=1"]}),
            json!({"apiVersion": "v1alpha1", "kind": "ExtensionServiceConfig", "name": "sandbox-readiness", "environment": ["SANDBOX_READINESS_REQUIRE_USERNS=true"]}),
        ];
        assert_eq!(
            agent_environment(&docs).unwrap().unwrap(),
            ["SANDBOX_READINESS_REQUIRE_USERNS=true"]
        );
        assert_eq!(agent_environment(&docs[..1]).unwrap(), None);
    }
}
