//! The request bodies: a strategic merge patch of the condition on
//! `nodes/NAME/status` and a JSON merge patch of labels and annotations on
//! `nodes/NAME`. Both name only what the agent owns: `status.conditions`
//! merges by `type` (core/v1 `NodeStatus.conditions`, patchMergeKey
//! `type`), and a merge patch leaves every key it does not name.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::nodestatus::{
    condition::NodeCondition,
    labels::{owned, owned_annotation},
    DESIRED_ANNOTATION, OWNED_LABELS_ANNOTATION, VERDICT_BOOT_ANNOTATION,
};

/// `{"status":{"conditions":[condition]}}` for
/// `application/strategic-merge-patch+json`.
pub fn status_patch(condition: &NodeCondition) -> Vec<u8> {
    let body = json!({ "status": { "conditions": [condition] } });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The Node's labels and annotations as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The merge patch (`application/merge-patch+json`) that makes the Node
/// carry `wanted` labels, drop the labels the agent set before and no
/// longer wants (as its owned-labels annotation lists them), list the new
/// set in that annotation, hold `desired` in the desired-state annotation
/// and `verdict_boot` in the verdict-boot annotation (each `None`: left as
/// it is; an empty `verdict_boot`, a boot id the agent could not read,
/// removes the annotation rather than claim a boot). `None` when the Node
/// already says all of it.
///
/// The caller sends this only after the status patch of the condition
/// `verdict_boot` belongs to: a reader that sees the annotation equal to
/// the Node's bootID may then trust the condition is this boot's.
pub fn metadata_patch(
    current: &Meta,
    wanted: &BTreeMap<String, String>,
    desired: Option<&str>,
    verdict_boot: Option<&str>,
) -> Option<Vec<u8>> {
    let mut labels = Map::new();
    for (k, v) in wanted {
        if current.labels.get(k) != Some(v) {
            labels.insert(k.clone(), Value::String(v.clone()));
        }
    }
    let before = owned(
        current
            .annotations
            .get(OWNED_LABELS_ANNOTATION)
            .map(String::as_str),
    );
    for k in before.iter().filter(|k| !wanted.contains_key(*k)) {
        if current.labels.contains_key(k) {
            labels.insert(k.clone(), Value::Null);
        }
    }
    let mut annotations = Map::new();
    let now_owned: BTreeSet<String> = wanted.keys().cloned().collect();
    let current_owned = current.annotations.get(OWNED_LABELS_ANNOTATION);
    if now_owned.is_empty() {
        if current_owned.is_some() {
            annotations.insert(OWNED_LABELS_ANNOTATION.into(), Value::Null);
        }
    } else {
        let value = owned_annotation(&now_owned);
        if current_owned != Some(&value) {
            annotations.insert(OWNED_LABELS_ANNOTATION.into(), Value::String(value));
        }
    }
    if let Some(d) = desired {
        if current
            .annotations
            .get(DESIRED_ANNOTATION)
            .map(String::as_str)
            != Some(d)
        {
            annotations.insert(DESIRED_ANNOTATION.into(), Value::String(d.into()));
        }
    }
    match verdict_boot {
        Some(b) if verdict_boot_changes(current, verdict_boot) => {
            let v = if b.is_empty() {
                Value::Null
            } else {
                Value::String(b.into())
            };
            annotations.insert(VERDICT_BOOT_ANNOTATION.into(), v);
        }
        _ => {}
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    serde_json::to_vec(&json!({ "metadata": metadata })).ok()
}

/// Whether [`metadata_patch`] with `verdict_boot` changes the Node's
/// verdict-boot annotation (the writer then writes the condition first,
/// even when the Node already says it).
pub fn verdict_boot_changes(current: &Meta, verdict_boot: Option<&str>) -> bool {
    let now = current
        .annotations
        .get(VERDICT_BOOT_ANNOTATION)
        .map(String::as_str);
    match verdict_boot {
        None => false,
        Some("") => now.is_some(),
        Some(b) => now != Some(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parsed(b: Option<Vec<u8>>) -> Value {
        b.and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn the_status_patch_names_only_the_condition() {
        let c = NodeCondition {
            type_: "sandbox-readiness.io/SandboxReady".into(),
            status: "True".into(),
            last_heartbeat_time: Some("2026-12-01T10:00:00Z".into()),
            last_transition_time: Some("2026-12-01T09:00:00Z".into()),
            reason: "Converged".into(),
            message: "ok".into(),
        };
        let v: Value = serde_json::from_slice(&status_patch(&c)).unwrap_or(Value::Null);
        assert_eq!(
            v,
            json!({"status":{"conditions":[{"type":"sandbox-readiness.io/SandboxReady","status":"True","lastHeartbeatTime":"2026-12-01T10:00:00Z","lastTransitionTime":"2026-12-01T09:00:00Z","reason":"Converged","message":"ok"}]}})
        );
    }

    #[test]
    fn metadata_patches() {
        let runsc = "sandbox-readiness.io/runsc";
        let runc = "sandbox-readiness.io/runc";
        let owned_both = r#"["sandbox-readiness.io/runc","sandbox-readiness.io/runsc"]"#;
        let other = ("node-role.kubernetes.io/worker", "");
        let fresh = Meta {
            labels: map(&[other]),
            annotations: BTreeMap::new(),
        };
        let wanted = map(&[(runsc, "ready"), (runc, "not-ready")]);
        // A fresh Node: every label, the owned set, the desired state.
        assert_eq!(
            parsed(metadata_patch(&fresh, &wanted, Some("{\"v\":1}"), None)),
            json!({"metadata":{"labels":{runsc:"ready",runc:"not-ready"},"annotations":{OWNED_LABELS_ANNOTATION: owned_both, DESIRED_ANNOTATION:"{\"v\":1}"}}})
        );
        // Already so: nothing to write.
        let done = Meta {
            labels: map(&[other, (runsc, "ready"), (runc, "not-ready")]),
            annotations: map(&[
                (OWNED_LABELS_ANNOTATION, owned_both),
                (DESIRED_ANNOTATION, "{\"v\":1}"),
            ]),
        };
        assert_eq!(
            metadata_patch(&done, &wanted, Some("{\"v\":1}"), None),
            None
        );
        assert_eq!(metadata_patch(&done, &wanted, None, None), None);
        // One value changes.
        let flipped = map(&[(runsc, "not-ready"), (runc, "not-ready")]);
        assert_eq!(
            parsed(metadata_patch(&done, &flipped, None, None)),
            json!({"metadata":{"labels":{runsc:"not-ready"}}})
        );
        // runc no longer wanted: removed, the owned set shrinks; the
        // kubelet's label is never touched.
        let only_runsc = map(&[(runsc, "ready")]);
        assert_eq!(
            parsed(metadata_patch(&done, &only_runsc, None, None)),
            json!({"metadata":{"labels":{runc:null},"annotations":{OWNED_LABELS_ANNOTATION:"[\"sandbox-readiness.io/runsc\"]"}}})
        );
        // --handler-labels off: every owned label goes, and the annotation.
        assert_eq!(
            parsed(metadata_patch(&done, &BTreeMap::new(), None, None)),
            json!({"metadata":{"labels":{runc:null,runsc:null},"annotations":{OWNED_LABELS_ANNOTATION:null}}})
        );
        // An owned set naming a foreign label never removes it.
        let edited = Meta {
            labels: map(&[other]),
            annotations: map(&[(
                OWNED_LABELS_ANNOTATION,
                r#"["node-role.kubernetes.io/worker"]"#,
            )]),
        };
        assert_eq!(
            parsed(metadata_patch(&edited, &BTreeMap::new(), None, None)),
            json!({"metadata":{"annotations":{OWNED_LABELS_ANNOTATION:null}}})
        );
    }

    #[test]
    fn the_metadata_patch_carries_the_verdict_boot() {
        let runsc = "sandbox-readiness.io/runsc";
        let owned = r#"["sandbox-readiness.io/runsc"]"#;
        let wanted = map(&[(runsc, "ready")]);
        let old = Meta {
            labels: map(&[(runsc, "ready")]),
            annotations: map(&[
                (OWNED_LABELS_ANNOTATION, owned),
                (VERDICT_BOOT_ANNOTATION, "boot-1"),
            ]),
        };
        // A verdict of a new boot: only the annotation changes, in the
        // same patch as any label.
        assert_eq!(
            parsed(metadata_patch(&old, &wanted, None, Some("boot-2"))),
            json!({"metadata":{"annotations":{VERDICT_BOOT_ANNOTATION:"boot-2"}}})
        );
        let flipped = map(&[(runsc, "not-ready")]);
        assert_eq!(
            parsed(metadata_patch(&old, &flipped, None, Some("boot-2"))),
            json!({"metadata":{"labels":{runsc:"not-ready"},"annotations":{VERDICT_BOOT_ANNOTATION:"boot-2"}}})
        );
        // The same boot: nothing to write.
        assert_eq!(metadata_patch(&old, &wanted, None, Some("boot-1")), None);
        // Before a verdict (None): the annotation is left as it is while the
        // labels go unknown.
        let unknown = map(&[(runsc, "unknown")]);
        assert_eq!(
            parsed(metadata_patch(&old, &unknown, None, None)),
            json!({"metadata":{"labels":{runsc:"unknown"}}})
        );
        // A fresh Node gets it; a boot id the agent could not read removes
        // it rather than claim one, and is nothing when there is none.
        let fresh = Meta::default();
        assert_eq!(
            parsed(metadata_patch(
                &fresh,
                &BTreeMap::new(),
                None,
                Some("boot-2")
            )),
            json!({"metadata":{"annotations":{VERDICT_BOOT_ANNOTATION:"boot-2"}}})
        );
        assert_eq!(
            parsed(metadata_patch(&old, &wanted, None, Some(""))),
            json!({"metadata":{"annotations":{VERDICT_BOOT_ANNOTATION:null}}})
        );
        assert_eq!(
            metadata_patch(&fresh, &BTreeMap::new(), None, Some("")),
            None
        );
    }
}
