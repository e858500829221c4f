//! The write: the Machine's `status.conditions` with the controller's
//! condition set, as a JSON merge patch guarded by `metadata.resourceVersion`.
//! Pure.
//!
//! Machines are custom resources, so there is no strategic merge: a JSON
//! merge patch replaces the whole list (RFC 7386). The list sent is the one
//! just read with only our condition changed, and the resourceVersion it was
//! read at makes the API server refuse it (409) if anyone — Cluster API's
//! Machine controller writing `Ready` or `NodeHealthy` — wrote in between;
//! the caller then re-reads and plans again, so no other condition is ever
//! overwritten with an old value.

use serde_json::{json, Map, Value};

use crate::condition::{Status, Verdict};

/// The controller's condition as it stands on a Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub status: Option<Status>,
    pub reason: String,
    pub message: String,
    pub observed_generation: Option<i64>,
    pub last_transition_time: Option<String>,
}

/// The condition of type `ty` in a `status.conditions` list.
pub fn existing(conditions: &[Value], ty: &str) -> Option<Existing> {
    let c = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?;
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(Existing {
        status: Status::parse(&s("status")),
        reason: s("reason"),
        message: s("message"),
        observed_generation: c.get("observedGeneration").and_then(Value::as_i64),
        last_transition_time: c
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// The planned write of one Machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The whole `status.conditions` list to send.
    pub conditions: Vec<Value>,
    /// The status before (`None`: the Machine had no such condition).
    pub from: Option<Status>,
    pub to: Status,
}

impl Plan {
    /// The status changed (an Event is due, `lastTransitionTime` moved).
    pub fn transition(&self) -> bool {
        self.from != Some(self.to)
    }
}

/// The new `status.conditions`, or `None` when the Machine already says
/// this (no write at all). `now` is RFC 3339 with seconds, as
/// `metav1.Time` serialises.
///
/// A new `generation` alone is no reason to write: Cluster API bumps a new
/// Machine's generation twice while it reconciles it (the providerID and
/// the infrastructure's fields copied into its spec), and neither its
/// summary of readiness gates nor `kubectl wait` reads a condition's
/// `observedGeneration`; the generation rides along on the next write that
/// changes what the condition says, as Cluster API does for its own
/// `Paused` condition (`util/paused`). Every spec change that can change
/// the verdict (a gate's polarity, the bootstrap config) changes what it
/// says, and so is written.
pub fn plan(
    conditions: &[Value],
    ty: &str,
    v: &Verdict,
    generation: Option<i64>,
    now: &str,
) -> Option<Plan> {
    let old = existing(conditions, ty);
    if let Some(o) = &old {
        if o.status == Some(v.status)
            && o.reason == v.reason
            && o.message == v.message
            && o.last_transition_time.is_some()
        {
            return None;
        }
    }
    let from = old.as_ref().and_then(|o| o.status);
    // lastTransitionTime moves only when the status does (API conventions).
    let ltt = match &old {
        Some(o) if o.status == Some(v.status) => o
            .last_transition_time
            .clone()
            .unwrap_or_else(|| now.to_string()),
        _ => now.to_string(),
    };
    let mut c = Map::new();
    c.insert("type".into(), json!(ty));
    c.insert("status".into(), json!(v.status.as_str()));
    if let Some(g) = generation {
        c.insert("observedGeneration".into(), json!(g));
    }
    c.insert("lastTransitionTime".into(), json!(ltt));
    c.insert("reason".into(), json!(v.reason));
    c.insert("message".into(), json!(v.message));
    let new = Value::Object(c);
    let mut out: Vec<Value> = Vec::with_capacity(conditions.len() + 1);
    let mut placed = false;
    for c in conditions {
        if c.get("type").and_then(Value::as_str) == Some(ty) {
            if !placed {
                out.push(new.clone());
                placed = true;
            }
            // A duplicate of our type (never valid: the list is a map keyed
            // by type) is dropped rather than written back.
        } else {
            out.push(c.clone());
        }
    }
    if !placed {
        out.push(new);
    }
    Some(Plan {
        conditions: out,
        from,
        to: v.status,
    })
}

/// The body of `PATCH …/machines/NAME/status` (`application/merge-patch+json`).
/// The conditions without those of type `ty`; `None` when there is none.
pub fn without(conditions: &[Value], ty: &str) -> Option<Vec<Value>> {
    let out: Vec<Value> = conditions
        .iter()
        .filter(|c| c.get("type").and_then(Value::as_str) != Some(ty))
        .cloned()
        .collect();
    (out.len() != conditions.len()).then_some(out)
}

pub fn body(resource_version: &str, conditions: &[Value]) -> Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": conditions},
    })
}

/// The Event a transition to `to` records: (type, reason).
/// A Machine's first condition records none unless it is `False`: a first
/// `Unknown` (a new Machine) judged nothing, and a first `True` changed
/// nothing a reader waits on — it is what the controller writes onto every
/// ready Machine when it is installed (1,000 Events for 1,000 Machines,
/// half the writes of that start). A rollout's new Machine goes Unknown →
/// True and records its `SandboxReady`; a new broken node records its
/// Warning.
pub fn event_for(from: Option<Status>, to: Status) -> Option<(&'static str, &'static str)> {
    if from == Some(to) {
        return None;
    }
    match (from, to) {
        (None, Status::Unknown | Status::True) => None,
        (_, Status::True) => Some(("Normal", "SandboxReady")),
        (_, Status::False | Status::Unknown) => Some(("Warning", "SandboxNotReady")),
    }
}

/// The Event a write records, knowing the condition it replaces: a gate
/// newly found with `polarity: Negative` is a Warning of its own (the
/// status alone, Unknown, would not say it), else [`event_for`].
pub fn event_for_write(
    old: Option<&Existing>,
    v: &Verdict,
) -> Option<(&'static str, &'static str)> {
    use crate::condition::GATE_POLARITY_NEGATIVE;
    if v.reason == GATE_POLARITY_NEGATIVE {
        return (old.map(|o| o.reason.as_str()) != Some(GATE_POLARITY_NEGATIVE))
            .then_some(("Warning", GATE_POLARITY_NEGATIVE));
    }
    event_for(old.and_then(|o| o.status), v.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_gate_is_one_warning() {
        let neg = crate::condition::negative_gate(TY);
        assert_eq!(
            event_for_write(None, &neg),
            Some(("Warning", "GatePolarityNegative"))
        );
        let was_true = existing(&[ours("True", "R", "m", 1)], TY);
        assert_eq!(
            event_for_write(was_true.as_ref(), &neg),
            Some(("Warning", "GatePolarityNegative"))
        );
        let already = existing(&[ours("Unknown", "GatePolarityNegative", "m", 1)], TY);
        assert_eq!(event_for_write(already.as_ref(), &neg), None);
        assert_eq!(
            event_for_write(already.as_ref(), &v(Status::True, "R", "m")),
            Some(("Normal", "SandboxReady"))
        );
    }

    const TY: &str = "sandbox-readiness.io/SandboxReady";
    const NOW: &str = "2026-12-01T22:00:00Z";
    const EARLIER: &str = "2026-12-01T21:00:00Z";

    fn v(status: Status, reason: &str, message: &str) -> Verdict {
        Verdict {
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn capi() -> Vec<Value> {
        vec![
            json!({"type":"Ready","status":"False","reason":"NotReady","lastTransitionTime":EARLIER}),
            json!({"type":"NodeHealthy","status":"True","reason":"NodeHealthy","lastTransitionTime":EARLIER}),
        ]
    }

    fn ours(status: &str, reason: &str, message: &str, gen: i64) -> Value {
        json!({"type":TY,"status":status,"observedGeneration":gen,"lastTransitionTime":EARLIER,"reason":reason,"message":message})
    }

    #[test]
    fn table() {
        use Status::*;
        // (name, existing list, verdict, generation, want: None = no write,
        //  Some((lastTransitionTime, from)))
        type Case = (
            &'static str,
            Vec<Value>,
            Verdict,
            Option<i64>,
            Option<(&'static str, Option<Status>)>,
        );
        let cases: Vec<Case> = vec![
            (
                "first write appends",
                capi(),
                v(Unknown, "NodeNotYetAssigned", "m"),
                Some(1),
                Some((NOW, None)),
            ),
            (
                "unchanged: no write",
                [capi(), vec![ours("True", "R", "m", 1)]].concat(),
                v(True, "R", "m"),
                Some(1),
                None,
            ),
            (
                "message change keeps the transition time",
                [capi(), vec![ours("False", "A", "m", 1)]].concat(),
                v(False, "A", "other"),
                Some(1),
                Some((EARLIER, Some(False))),
            ),
            (
                "reason change keeps the transition time",
                [capi(), vec![ours("False", "A", "m", 1)]].concat(),
                v(False, "B", "m"),
                Some(1),
                Some((EARLIER, Some(False))),
            ),
            (
                "a new generation alone is not written",
                [capi(), vec![ours("True", "R", "m", 1)]].concat(),
                v(True, "R", "m"),
                Some(3),
                None,
            ),
            (
                "a change of meaning carries the new generation",
                [capi(), vec![ours("False", "A", "m", 1)]].concat(),
                v(False, "A", "other"),
                Some(3),
                Some((EARLIER, Some(False))),
            ),
            (
                "status change moves the transition time",
                [capi(), vec![ours("False", "A", "m", 1)]].concat(),
                v(True, "R", "m"),
                Some(1),
                Some((NOW, Some(False))),
            ),
            (
                "malformed status is a transition",
                vec![ours("yes", "R", "m", 1)],
                v(True, "R", "m"),
                Some(1),
                Some((NOW, None)),
            ),
        ];
        for (name, list, verdict, gen, want) in cases {
            let got = plan(&list, TY, &verdict, gen, NOW);
            match (got, want) {
                (None, None) => {}
                (Some(p), Some((ltt, from))) => {
                    assert_eq!(p.from, from, "{name}");
                    let c = existing(&p.conditions, TY)
                        .unwrap_or_else(|| panic!("{name}: no condition"));
                    assert_eq!(c.last_transition_time.as_deref(), Some(ltt), "{name}");
                    assert_eq!(c.status, Some(verdict.status), "{name}");
                    assert_eq!(c.reason, verdict.reason, "{name}");
                    assert_eq!(c.observed_generation, gen, "{name}");
                    // Every other condition is sent back exactly as read.
                    let others: Vec<&Value> = list.iter().filter(|c| c["type"] != TY).collect();
                    let sent: Vec<&Value> =
                        p.conditions.iter().filter(|c| c["type"] != TY).collect();
                    assert_eq!(others, sent, "{name}");
                    assert_eq!(
                        p.conditions.iter().filter(|c| c["type"] == TY).count(),
                        1,
                        "{name}"
                    );
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn our_condition_stays_in_place_and_duplicates_go() {
        let list = vec![
            json!({"type":"Ready","status":"True","reason":"Ready","lastTransitionTime":EARLIER}),
            ours("False", "A", "m", 1),
            json!({"type":"NodeHealthy","status":"True","reason":"NodeHealthy","lastTransitionTime":EARLIER}),
            ours("False", "A", "m", 1),
        ];
        let p = plan(&list, TY, &v(Status::True, "R", "m"), Some(1), NOW)
            .unwrap_or_else(|| panic!("write"));
        let types: Vec<&str> = p
            .conditions
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["Ready", TY, "NodeHealthy"]);
    }

    #[test]
    fn body_carries_the_resource_version_and_the_whole_list() {
        let b = body("42", &capi());
        assert_eq!(b["metadata"]["resourceVersion"], "42");
        assert_eq!(b["status"]["conditions"].as_array().map(Vec::len), Some(2));
        assert_eq!(b.as_object().map(|o| o.len()), Some(2));
    }

    #[test]
    fn events() {
        use Status::*;
        assert_eq!(event_for(None, Unknown), None);
        assert_eq!(event_for(Some(Unknown), Unknown), None);
        assert_eq!(event_for(None, True), None);
        assert_eq!(
            event_for(Some(False), True),
            Some(("Normal", "SandboxReady"))
        );
        assert_eq!(
            event_for(Some(Unknown), False),
            Some(("Warning", "SandboxNotReady"))
        );
        assert_eq!(
            event_for(Some(True), Unknown),
            Some(("Warning", "SandboxNotReady"))
        );
        assert_eq!(event_for(None, False), Some(("Warning", "SandboxNotReady")));
    }

    #[test]
    fn without_removes_only_our_type() {
        let conds = vec![
            json!({"type": "Ready", "status": "True"}),
            json!({"type": TY, "status": "True"}),
        ];
        assert_eq!(
            without(&conds, TY),
            Some(vec![json!({"type": "Ready", "status": "True"})])
        );
        assert_eq!(without(&conds[..1], TY), None);
    }
}
