//! The pool's desired state from its own configuration: a Talos machine
//! config (single or multi-document), a Cluster API Bootstrap Provider
//! Talos `TalosConfig`/`TalosConfigTemplate` (v1alpha3, v1beta1), or a
//! `List` of those, in JSON or YAML as `kubectl get … -o json|yaml`
//! prints them. Every sysctl comes with where it was set. Pure.
//!
//! CABPT's order (siderolabs/cluster-api-bootstrap-provider-talos
//! `controllers/talosconfig_controller.go`, commit e21a01e06ee3): the base
//! is `data` for `generateType: none`, else a generated config (which sets
//! no sysctls); then `configPatches` (RFC 6902, through Talos's
//! `configpatcher.JSON6902`, which refuses multi-document configs); then
//! `strategicPatches`, each loaded by `configpatcher.LoadPatch` (a
//! strategic merge patch, or a JSON patch written as YAML or JSON).

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use super::{
    env, json6902,
    talos::{self, Place},
    yaml,
};
use crate::proto::v1::{DesiredState, SysctlExpectation};

/// Why a document gives no desired state. One line naming the source.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{origin}: {message}")]
pub struct PoolError {
    pub origin: String,
    pub message: String,
}

/// A value and where it was set
/// (`strategicPatches[1] (SysctlConfig)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced {
    pub value: String,
    pub source: String,
}

/// The agent's own desired state as the configuration gives it (its
/// `ExtensionServiceConfig` environment).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDesired {
    pub desired: DesiredState,
}

/// What the pool's configuration tells its machines.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolDesired {
    /// `TalosConfigTemplate tenant-a/pool-md0-3f9c2a`, or `machine config`.
    pub origin: String,
    /// Every sysctl the configuration sets, by name.
    pub sysctls: BTreeMap<String, Sourced>,
    /// The agent's `ExtensionServiceConfig`, when the configuration holds one.
    pub agent: Option<AgentDesired>,
}

impl PoolDesired {
    /// The sysctls as a desired state (for [`super::covers()`]).
    pub fn desired(&self) -> DesiredState {
        DesiredState {
            sysctls: self
                .sysctls
                .iter()
                .map(|(name, s)| SysctlExpectation {
                    name: name.clone(),
                    value: s.value.clone(),
                })
                .collect(),
            ..DesiredState::default()
        }
    }

    /// `origin: source` for a key's row.
    pub fn source_of(&self, key: &str) -> Option<String> {
        self.sysctls
            .get(key)
            .map(|s| format!("{}: {}", self.origin, s.source))
    }
}

const CABPT_GROUP: &str = "bootstrap.cluster.x-k8s.io";
const CABPT_VERSIONS: [&str; 2] = ["v1alpha3", "v1beta1"];

/// The pool's desired state from `text` (`origin` names it in errors,
/// "--desired-from tct.yaml"); `pick` (`[NAMESPACE/]NAME`) chooses one
/// item of a list, or must name the one object given.
pub fn parse(text: &str, origin: &str, pick: Option<&str>) -> Result<PoolDesired, PoolError> {
    let err = |message: String| PoolError {
        origin: origin.to_string(),
        message,
    };
    let docs = yaml::documents(text).map_err(|e| err(format!("not YAML or JSON: {e}")))?;
    let kind = |v: &Value| {
        v.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match docs.as_slice() {
        [one]
            if kind(one) == "List" || kind(one).ends_with("List") && one.get("items").is_some() =>
        {
            let items = one
                .get("items")
                .and_then(Value::as_array)
                .ok_or_else(|| err("the list has no items".into()))?;
            let chosen: Vec<&Value> = match pick {
                Some(p) => items.iter().filter(|i| matches_name(i, p)).collect(),
                None => items.iter().collect(),
            };
            match chosen.as_slice() {
                [item] => bootstrap(item).map_err(err),
                [] if pick.is_some() => Err(err(format!(
                    "the list holds no item named {}",
                    shown(pick.unwrap_or(""))
                ))),
                [] => Err(err("the list is empty".into())),
                many => Err(err(format!(
                    "the list holds {} items{}: pick one with --desired-name [NAMESPACE/]NAME",
                    many.len(),
                    if pick.is_some() { " of that name" } else { "" }
                ))),
            }
        }
        [one] if is_bootstrap(one) => {
            if let Some(p) = pick.filter(|p| !matches_name(one, p)) {
                return Err(err(format!("{} is not {}", object_name(one), shown(p))));
            }
            bootstrap(one).map_err(err)
        }
        _ => {
            if let Some(one) = docs.iter().find(|d| is_bootstrap(d)) {
                return Err(err(format!(
                    "{} must be the only document",
                    object_name(one)
                )));
            }
            if docs.len() == 1
                && docs[0].get("kind").is_some()
                && docs[0].get("apiVersion").and_then(Value::as_str) != Some("v1alpha1")
            {
                return Err(err(format!(
                    "expected a Talos machine config, a TalosConfig or a TalosConfigTemplate (bootstrap.cluster.x-k8s.io v1alpha3 or v1beta1), found kind {}",
                    shown(&kind(&docs[0]))
                )));
            }
            talos::check_machine_config(&docs, "the machine config").map_err(err)?;
            let mut b = Build::new("machine config");
            b.stage(&docs, "").map_err(|e| err(e.message))?;
            b.finish(&docs).map_err(err)
        }
    }
}

fn shown(s: &str) -> String {
    format!("{:?}", s.chars().take(80).collect::<String>())
}

/// The group of a Kubernetes object's apiVersion (`group/version`).
fn api_group(v: &Value) -> Option<&str> {
    v.get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|a| a.split_once('/'))
        .map(|(g, _)| g)
}

fn is_bootstrap(v: &Value) -> bool {
    api_group(v) == Some(CABPT_GROUP)
}

fn meta(v: &Value, field: &str) -> String {
    v.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(253)
        .collect()
}

/// `KIND NAMESPACE/NAME`.
fn object_name(v: &Value) -> String {
    let kind: String = v
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .chars()
        .take(40)
        .collect();
    let (ns, name) = (meta(v, "namespace"), meta(v, "name"));
    if ns.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

fn matches_name(v: &Value, pick: &str) -> bool {
    match pick.split_once('/') {
        Some((ns, name)) => meta(v, "namespace") == ns && meta(v, "name") == name,
        None => meta(v, "name") == pick,
    }
}

/// `major.minor` of a `talosVersion` (`v1.12`, `1.12.0`).
fn talos_minor(v: &str) -> Option<(u64, u64)> {
    let mut parts = v.trim_start_matches('v').split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A `TalosConfig` or `TalosConfigTemplate`.
fn bootstrap(obj: &Value) -> Result<PoolDesired, String> {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|a| a.split_once('/'))
        .map_or("", |(_, v)| v);
    let name = object_name(obj);
    if api_group(obj) != Some(CABPT_GROUP) || !CABPT_VERSIONS.contains(&version) {
        return Err(format!(
            "{name}: expected {CABPT_GROUP}/v1alpha3 or /v1beta1, found {}",
            shown(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""))
        ));
    }
    let spec = match kind {
        "TalosConfig" => obj.get("spec"),
        "TalosConfigTemplate" => obj.pointer("/spec/template/spec"),
        other => {
            return Err(format!(
                "expected a TalosConfig or a TalosConfigTemplate, found kind {}",
                shown(other)
            ))
        }
    }
    .ok_or_else(|| format!("{name} has no spec"))?;
    let field = |f: &str| spec.get(f).and_then(Value::as_str).unwrap_or("");
    let generate = field("generateType");
    let talos_version = field("talosVersion");
    let mut b = Build::new(&name);
    let (mut docs, generated) = match generate {
        "none" => {
            let data = field("data");
            if data.trim().is_empty() {
                return Err(format!("{name}: generateType none without data"));
            }
            let docs = yaml::documents(data).map_err(|e| format!("{name}: data: {e}"))?;
            talos::check_machine_config(&docs, "data").map_err(|e| format!("{name}: {e}"))?;
            (talos::as_reencoded(docs), false)
        }
        // machine.ParseType's names; the generated config sets no sysctl.
        "init" | "controlplane" | "worker" | "join" => {
            (generated_base(generate, talos_version), true)
        }
        other => {
            return Err(format!(
                "{name}: unknown generateType {} (none, init, controlplane or worker)",
                shown(other)
            ))
        }
    };
    let base = if generated {
        format!("generated {generate} config")
    } else {
        "data".into()
    };
    b.stage(&docs, &base).map_err(|e| e.message)?;
    // From 1.12 a generated config has several documents (HostnameConfig…);
    // without a talosVersion CABPT generates for its own machinery's
    // release (v0.6.11: 1.12).
    let new_talos =
        talos_version.trim().is_empty() || talos_minor(talos_version).is_some_and(|v| v >= (1, 12));
    // (The generated base holds its HostnameConfig document itself, and a
    // patch that deletes it leaves one document, as in Talos.)
    let multi = |docs: &[Value]| docs.len() > 1;

    let patches = match spec.get("configPatches") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(format!("{name}: configPatches is not a list")),
    };
    if !patches.is_empty() {
        if generated && new_talos {
            return Err(format!(
                "{name}: configPatches (JSON patches) cannot be applied for talosVersion {} (1.12 or later: the config has several documents); CABPT cannot apply them either: use strategicPatches",
                shown(talos_version)
            ));
        }
        if multi(&docs) {
            return Err(format!(
                "{name}: configPatches (JSON patches) cannot be applied to a multi-document config, as CABPT cannot: use strategicPatches"
            ));
        }
    }
    for (i, op) in patches.iter().enumerate() {
        let label = format!("configPatches[{i}]");
        // CABPT's ConfigPatches type holds op, path and value only: the API
        // server drops a `from`, and the patch then fails in CABPT.
        if let Some(w) = op
            .get("op")
            .and_then(Value::as_str)
            .filter(|w| *w == "move" || *w == "copy")
        {
            return Err(format!(
                "{name}: {label}: a {w} needs `from`, which CABPT's configPatches cannot hold (its type has op, path and value; the API server drops `from` and CABPT then fails): use add or replace, or a strategic patch"
            ));
        }
        json_patch_apply(&mut docs, std::slice::from_ref(op))
            .map_err(|e| format!("{name}: {label}: {e}"))?;
        b.stage(&docs, &label).map_err(|e| e.message)?;
    }

    let strategic = match spec.get("strategicPatches") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(format!("{name}: strategicPatches is not a list")),
    };
    for (i, p) in strategic.iter().enumerate() {
        let label = format!("strategicPatches[{i}]");
        let text = p
            .as_str()
            .ok_or_else(|| format!("{name}: {label} is not a string"))?;
        let pdocs = yaml::documents(text).map_err(|e| format!("{name}: {label}: {e}"))?;
        match pdocs.as_slice() {
            // configpatcher.LoadPatch takes a JSON patch (YAML or JSON) too.
            [Value::Array(ops)] => {
                if multi(&docs) {
                    return Err(format!(
                        "{name}: {label} is a JSON patch, which cannot be applied to a multi-document config"
                    ));
                }
                json_patch_apply(&mut docs, ops).map_err(|e| format!("{name}: {label}: {e}"))?;
            }
            _ => {
                if let Some((n, _)) = pdocs.iter().enumerate().find(|(_, d)| !d.is_object()) {
                    return Err(format!(
                        "{name}: {label} document {} is not a mapping",
                        n + 1
                    ));
                }
                talos::strategic_merge(&mut docs, &pdocs)
                    .map_err(|e| format!("{name}: {label}: {e}"))?;
                // What the patch sets explicitly is its own, even when the
                // value did not change.
                b.claim(&pdocs, &label);
            }
        }
        b.stage(&docs, &label).map_err(|e| e.message)?;
    }
    talos::pending_delete(&docs).map_err(|e| format!("{name}: strategicPatches: {e}"))?;
    b.finish(&docs).map_err(|e| format!("{name}: {e}"))
}

/// The shape of the documents Talos generates (`generate.Input.Config`):
/// the sections JSON patches commonly address exist, and no sysctl is set
/// (Talos generates none; the KSPP defaults apply on the node).
fn generated_base(kind: &str, talos_version: &str) -> Vec<Value> {
    let mut docs = vec![serde_json::json!({
        "version": "v1alpha1",
        "machine": {
            "type": kind, "certSANs": [], "kubelet": {}, "network": {},
            "install": {}, "registries": {}, "features": {}
        },
        "cluster": {"controlPlane": {}, "network": {}, "discovery": {}}
    })];
    // From 1.12 (and for CABPT's own default, 1.12) the generated config
    // adds a HostnameConfig document (machinery v1.12.0 `generate`).
    if talos_version.trim().is_empty() || talos_minor(talos_version).is_some_and(|v| v >= (1, 12)) {
        docs.push(serde_json::json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}));
    }
    docs
}

/// Applies RFC 6902 operations to the one document. Errors name the
/// operation and the path (from the template), never a value.
fn json_patch_apply(docs: &mut [Value], ops: &[Value]) -> Result<(), String> {
    let ops: Vec<json6902::Op> = ops
        .iter()
        .map(json6902::Op::from_json)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not an RFC 6902 operation: {e}"))?;
    let [doc] = docs else {
        return Err("a JSON patch needs a single-document config".into());
    };
    json6902::apply(doc, &ops)
}

/// Follows the sysctls through the stages, so each keeps the stage that
/// last set it.
struct Build {
    origin: String,
    now: BTreeMap<String, (String, Place)>,
    sources: BTreeMap<String, String>,
    claimed: BTreeMap<String, String>,
}

impl Build {
    fn new(origin: &str) -> Self {
        Build {
            origin: origin.to_string(),
            now: BTreeMap::new(),
            sources: BTreeMap::new(),
            claimed: BTreeMap::new(),
        }
    }

    /// Marks the keys a patch sets explicitly as its own.
    fn claim(&mut self, patch: &[Value], label: &str) {
        if let Ok(s) = talos::sysctls(patch) {
            for (k, (_, place)) in s {
                self.claimed
                    .insert(k, format!("{label} ({})", place.as_str()));
            }
        }
    }

    fn stage(&mut self, docs: &[Value], label: &str) -> Result<(), PoolError> {
        let next = talos::sysctls(docs).map_err(|message| PoolError {
            origin: self.origin.clone(),
            message: if label.is_empty() {
                message
            } else {
                format!("{label}: {message}")
            },
        })?;
        for (k, (v, place)) in &next {
            let claimed = self.claimed.remove(k);
            if self.now.get(k).map(|(pv, pp)| (pv, pp)) != Some((v, place)) || claimed.is_some() {
                let src = claimed.unwrap_or_else(|| {
                    if label.is_empty() {
                        place.as_str().to_string()
                    } else {
                        format!("{label} ({})", place.as_str())
                    }
                });
                self.sources.insert(k.clone(), src);
            }
        }
        self.claimed.clear();
        self.sources.retain(|k, _| next.contains_key(k));
        self.now = next;
        Ok(())
    }

    fn finish(self, docs: &[Value]) -> Result<PoolDesired, String> {
        let agent = match talos::agent_environment(docs)? {
            None => None,
            Some(entries) => Some(AgentDesired {
                desired: env::desired_from_env(entries.iter().map(String::as_str))
                    .map_err(|e| format!("ExtensionServiceConfig {}: {e}", talos::AGENT_SERVICE))?,
            }),
        };
        let sysctls = self
            .now
            .into_iter()
            .map(|(k, (value, place))| {
                let source = self
                    .sources
                    .get(&k)
                    .cloned()
                    .unwrap_or_else(|| place.as_str().to_string());
                (k, Sourced { value, source })
            })
            .collect();
        Ok(PoolDesired {
            origin: self.origin,
            sysctls,
            agent,
        })
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
