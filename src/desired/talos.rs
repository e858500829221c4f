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

/// The documents as CABPT passes them on after loading and re-encoding
/// `data` (Talos's encoder): an empty `machine.sysctls` is left out
/// (`omitempty`), `machine.certSANs` is always written. JSON patches then
/// see the same paths as in CABPT.
pub fn as_reencoded(mut docs: Vec<Value>) -> Vec<Value> {
    for d in docs.iter_mut().filter(|d| d.get("kind").is_none()) {
        if let Some(Value::Object(m)) = d.get_mut("machine") {
            if m.get("sysctls")
                .is_some_and(|s| s.as_object().is_some_and(Map::is_empty) || s.is_null())
            {
                m.remove("sysctls");
            }
            m.entry("certSANs")
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    docs
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
        .collect::<Result<Vec<String>, _>>()
        .map(|entries| Some(last_wins(entries)))
}

/// The environment as the agent's process gets it: of entries naming the
/// same variable only the last is kept (runc keeps the last before exec,
/// extension/README.md), where the ExtensionServiceConfig lists it twice,
/// as two merged patches of the document do (Talos appends lists).
fn last_wins(entries: Vec<String>) -> Vec<String> {
    let name = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_string();
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let n = name(&e);
        out.retain(|o| name(o) != n);
        out.push(e);
    }
    out
}

/// True when a patch value deletes what it lands on (`$patch: delete`).
fn is_delete(v: &Value) -> bool {
    v.get("$patch").and_then(Value::as_str) == Some("delete")
}

/// Fields Talos replaces instead of appending to (`merge:"replace"` in
/// `config/types/v1alpha1/v1alpha1_types.go`, v1.12.0 and v1.13.9).
const REPLACED: [&str; 3] = [
    "cluster.network.podSubnets",
    "cluster.network.serviceSubnets",
    "cluster.apiServer.auditPolicy",
];

/// Map-typed fields (Go `map[string]…`): a `$patch: delete` of a key they
/// lack finds nothing and Talos refuses it; deleting a missing struct field
/// just leaves it unset.
const MAPS: [&str; 5] = [
    "machine.sysctls",
    "params",
    "machine.nodeLabels",
    "machine.nodeAnnotations",
    "machine.kubelet.extraArgs",
];

/// The refusal of a `$patch: delete` that finds nothing to delete (Talos:
/// "patch delete: path '…': lookup failed").
fn nothing_to_delete(path: &str) -> String {
    format!("$patch: delete of {path}: there is nothing to delete (Talos refuses such a patch)")
}

/// The first key and scalar value of a sequence element's delete marker
/// (`- ip: 10.0.0.1` + `$patch: delete`): Talos deletes the element whose
/// field of that name has that value.
fn element_selector(v: &Value) -> Option<(&str, String)> {
    v.as_object()?
        .iter()
        .find(|(k, _)| *k != "$patch")
        .and_then(|(k, v)| scalar_text(v).map(|t| (k.as_str(), t)))
}

/// Talos's merge of one patch document into one document: mappings key by
/// key, sequences appended (a few replaced, [`REPLACED`]), scalars
/// replaced except by an empty value, `$patch: delete` removes and must
/// find what it removes (`pkg/machinery/config/merge` and the loader's
/// delete selectors, `config/configloader/internal/decoder/delete.go`,
/// v1.12.0 and v1.13.9).
fn merge(left: &mut Value, right: &Value, path: &str) -> Result<(), String> {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => merge_maps(l, r, path),
        (Value::Array(l), Value::Array(r)) => {
            if REPLACED.contains(&path) {
                if !r.is_empty() {
                    *l = r.clone();
                }
                return Ok(());
            }
            for v in r {
                if !is_delete(v) {
                    l.push(strip_deletes(v, path)?);
                    continue;
                }
                let Some((key, want)) = element_selector(v) else {
                    return Err(format!(
                        "$patch: delete in the list {path} names no field to select the element by"
                    ));
                };
                let at = l.iter().position(|e| {
                    e.get(key).and_then(scalar_text).as_deref() == Some(want.as_str())
                });
                match at {
                    Some(i) => {
                        l.remove(i);
                    }
                    None => return Err(nothing_to_delete(&format!("{path}[{key}]"))),
                }
            }
            Ok(())
        }
        // Talos's merge keeps the left value when the right one is empty
        // (a zero Go string does not overwrite).
        (l, Value::String(r)) if r.is_empty() && is_set_scalar(l) => Ok(()),
        (l, Value::Null) if is_set_scalar(l) => Ok(()),
        (l, r) => {
            *l = strip_deletes(r, path)?;
            Ok(())
        }
    }
}

/// A scalar that is there (Talos holds every sysctl value as a string
/// once loaded, whatever JSON type a JSON patch gave it).
fn is_set_scalar(v: &Value) -> bool {
    !(v.is_object() || v.is_array() || v.is_null())
}

fn merge_maps(
    l: &mut Map<String, Value>,
    r: &Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    for (k, v) in r {
        if k == "$patch" {
            continue;
        }
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        if is_delete(v) {
            if l.remove(k).is_none() && MAPS.contains(&path) {
                return Err(nothing_to_delete(&here));
            }
            continue;
        }
        match l.get_mut(k) {
            Some(existing) if !existing.is_null() => merge(existing, v, &here)?,
            _ => {
                l.insert(k.clone(), strip_deletes(v, &here)?);
            }
        }
    }
    Ok(())
}

/// A value put where nothing was: a delete marker inside it finds nothing
/// to delete.
fn strip_deletes(v: &Value, path: &str) -> Result<Value, String> {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == "$patch" || is_delete(v) {
                    if is_delete(v) || v.as_str() == Some("delete") {
                        return Err(nothing_to_delete(&here));
                    }
                    continue;
                }
                out.insert(k.clone(), strip_deletes(v, &here)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(a) => {
            if a.iter().any(is_delete) {
                return Err(nothing_to_delete(path));
            }
            Ok(v.clone())
        }
        other => Ok(other.clone()),
    }
}

/// Talos's strategic merge of patch documents into a configuration:
/// documents with the same identity are merged, a `$patch: delete`
/// document removes its match, others are appended
/// (`configpatcher.StrategicMerge`, siderolabs/talos
/// `pkg/machinery/config/configpatcher/strategic.go` at v1.14.0-rc.1).
/// A delete that finds nothing to delete is refused, as Talos refuses it.
pub fn strategic_merge(docs: &mut Vec<Value>, patch: &[Value]) -> Result<(), String> {
    for p in patch {
        let id = identity(p);
        let at = docs.iter().position(|d| identity(d) == id);
        match (at, is_delete(p)) {
            (Some(i), true) if p.get("kind").is_some() || only_delete(p) => {
                docs.remove(i);
            }
            (Some(i), _) if is_delete(&docs[i]) => {
                return Err(format!(
                    "the document {} was deleted by an earlier patch that found nothing to delete; Talos cannot merge into that",
                    kind_shown(p)
                ))
            }
            (Some(i), _) => merge(&mut docs[i], p, "")?,
            // Talos keeps a delete that matched no document as a document
            // of its own: a later delete of the same document removes it,
            // else the result no longer loads (see [`pending_delete`]).
            (None, true) if p.get("kind").is_some() || only_delete(p) => docs.push(p.clone()),
            (None, _) => docs.push(strip_deletes(p, "")?),
        }
    }
    Ok(())
}

/// The refusal of a configuration that still holds a delete which matched
/// no document: Talos encodes it as an empty document, and the result fails
/// to load ("duplicate document /v1alpha1/ is not allowed").
pub fn pending_delete(docs: &[Value]) -> Result<(), String> {
    match docs.iter().find(|d| is_delete(d)) {
        Some(d) => Err(nothing_to_delete(&format!(
            "the document {}",
            kind_shown(d)
        ))),
        None => Ok(()),
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
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["machine"]["sysctls"], json!({"a.b": "2"}));
        assert_eq!(docs[0]["machine"]["certSANs"], json!(["a", "b"]));
        assert_eq!(docs[1]["kind"], "SysctlConfig");
    }

    /// Differences machinery v1.12.0/v1.13.9 showed (tests/talos_oracle.rs).
    #[test]
    fn deletes_must_find_something_and_empty_values_keep_the_old_one() {
        let base = vec![json!({
            "version": "v1alpha1",
            "machine": {"sysctls": {"a.b": "1"}, "network": {"extraHostEntries": [{"ip": "10.0.0.1"}]}},
            "cluster": {"network": {"podSubnets": ["a"]}}
        })];
        for missing in [
            json!({"machine": {"sysctls": {"zz": {"$patch": "delete"}}}}),
            json!({"machine": {"install": {"disk": {"$patch": "delete"}}}}),
            json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "$patch": "delete"}),
            json!({"machine": {"network": {"extraHostEntries": [{"ip": "10.9.9.9", "$patch": "delete"}]}}}),
        ] {
            let mut d = base.clone();
            let e = strategic_merge(&mut d, std::slice::from_ref(&missing))
                .and_then(|()| pending_delete(&d))
                .unwrap_err();
            assert!(e.contains("nothing to delete"), "{missing}: {e}");
        }
        let mut d = base.clone();
        strategic_merge(
            &mut d,
            &[json!({
                "machine": {"sysctls": {"a.b": ""}, "network": {"extraHostEntries": [{"ip": "10.0.0.1", "$patch": "delete"}]}},
                "cluster": {"network": {"podSubnets": ["b"]}}
            })],
        )
        .unwrap();
        assert_eq!(d[0]["machine"]["sysctls"]["a.b"], "1");
        let mut n = vec![json!({"version": "v1alpha1", "machine": {"sysctls": {"a.b": 262_144}}})];
        strategic_merge(&mut n, &[json!({"machine": {"sysctls": {"a.b": ""}}})]).unwrap();
        assert_eq!(n[0]["machine"]["sysctls"]["a.b"], 262_144);
        assert_eq!(d[0]["machine"]["network"]["extraHostEntries"], json!([]));
        assert_eq!(d[0]["cluster"]["network"]["podSubnets"], json!(["b"]));
        // Two deletes of a document that is not there cancel, as in Talos.
        let del = json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "$patch": "delete"});
        strategic_merge(&mut d, std::slice::from_ref(&del)).unwrap();
        strategic_merge(&mut d, &[del]).unwrap();
        pending_delete(&d).unwrap();
        // A struct field that is not there: nothing to do, no refusal.
        strategic_merge(
            &mut d,
            &[json!({"machine": {"install": {"$patch": "delete"}}})],
        )
        .unwrap();
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
        // A document merged twice lists a variable twice: the last counts.
        let twice = vec![
            json!({"apiVersion": "v1alpha1", "kind": "ExtensionServiceConfig", "name": "sandbox-readiness",
            "environment": ["SANDBOX_READINESS_SYSCTL=a.b=1", "X=1", "SANDBOX_READINESS_SYSCTL=a.b=2"]}),
        ];
        assert_eq!(
            agent_environment(&twice).unwrap().unwrap(),
            ["X=1", "SANDBOX_READINESS_SYSCTL=a.b=2"]
        );
    }
}
