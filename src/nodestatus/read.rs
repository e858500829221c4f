//! The reader's side, pure: what a Node as the API server returns it says
//! about its sandbox readiness — the condition, how old its heartbeat is,
//! and whether the desired state it was judged against (the
//! `sandbox-readiness.io/desired` annotation) covers a pool's. One function
//! for `check --from-node-conditions` and the readiness-gate controller, so
//! both judge a Node the same way.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::{
    desired,
    nodestatus::condition::{NodeCondition, Status},
    proto::v1::DesiredState,
};

/// What one Node says.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub name: String,
    /// The condition, when the Node has it.
    pub condition: Option<NodeCondition>,
    /// How old its `lastHeartbeatTime` is (`None`: absent or unreadable).
    pub heartbeat_age: Option<Duration>,
    /// The desired-state annotation, parsed (`None`: no annotation).
    pub desired: Option<Result<DesiredState, String>>,
}

/// A Node's verdict as a reader takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    Ready,
    /// The condition is `False`, or the node checks less than the pool asks.
    NotReady(String),
    /// No condition, `Unknown`, a stale heartbeat, or no annotation to
    /// compare with the pool's.
    Unknown(String),
}

/// Reads `node` (a Node object as JSON) at `now`.
pub fn read(node: &Value, condition_type: &str, now: SystemTime) -> Reading {
    let name = node["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let condition = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value::<NodeCondition>(c.clone()).ok())
        .find(|c| c.type_ == condition_type);
    let heartbeat_age = condition
        .as_ref()
        .and_then(|c| c.last_heartbeat_time.as_deref())
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO));
    let desired = node["metadata"]["annotations"][desired::ANNOTATION]
        .as_str()
        .map(|a| desired::from_annotation(a).map_err(|e| e.to_string()));
    Reading {
        name,
        condition,
        heartbeat_age,
        desired,
    }
}

/// Judges a reading: a heartbeat older than `stale_after` is unknown (the
/// agent may have stopped: its last word stays on the Node); with `pool`,
/// a `True` Node must also have been judged against a desired state that
/// covers the pool's.
pub fn judge(r: &Reading, stale_after: Duration, pool: Option<&DesiredState>) -> Judged {
    let Some(c) = &r.condition else {
        return Judged::Unknown(
            "no condition on the Node (is the agent running with --kubeconfig?)".into(),
        );
    };
    match r.heartbeat_age {
        None => return Judged::Unknown("the condition has no heartbeat".into()),
        Some(age) if age > stale_after => {
            return Judged::Unknown(format!(
                "the condition's heartbeat is {} old (stale after {})",
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(stale_after)
            ))
        }
        Some(_) => {}
    }
    let said = |c: &NodeCondition| {
        if c.message.is_empty() {
            c.reason.clone()
        } else {
            format!("{}: {}", c.reason, c.message)
        }
    };
    match Status::parse(&c.status) {
        Some(Status::False) => return Judged::NotReady(said(c)),
        Some(Status::Unknown) => return Judged::Unknown(said(c)),
        None => {
            return Judged::Unknown(format!(
                "the condition's status {:?} is not True, False or Unknown",
                c.status
            ))
        }
        Some(Status::True) => {}
    }
    let Some(pool) = pool else {
        return Judged::Ready;
    };
    match &r.desired {
        None => Judged::Unknown(format!(
            "the Node has no {} annotation to compare with the pool's desired state",
            desired::ANNOTATION
        )),
        Some(Err(e)) => Judged::Unknown(e.clone()),
        Some(Ok(node)) => match desired::covers(node, pool) {
            Ok(()) => Judged::Ready,
            Err(missing) => Judged::NotReady(format!(
                "the node checks less than its pool asks: {}",
                missing
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = crate::nodestatus::DEFAULT_CONDITION_TYPE;

    fn node(status: &str, heartbeat: &str, annotation: Option<&str>) -> Value {
        let mut n = json!({
            "metadata": {"name": "worker-1", "annotations": {}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": T, "status": status, "reason": "SysctlMismatch", "message": "user.max_user_namespaces is 0, expected 11255",
                 "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-12-01T09:00:00Z"}
            ]}
        });
        if let Some(a) = annotation {
            n["metadata"]["annotations"][desired::ANNOTATION] = json!(a);
        }
        n
    }

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-12-01T10:10:00Z").unwrap_or(SystemTime::UNIX_EPOCH)
    }

    #[test]
    fn nodes_are_judged() {
        let stale = Duration::from_secs(15 * 60);
        let userns =
            r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns"]}"#;
        let pool = DesiredState {
            sysctls: vec![crate::proto::v1::SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: "11255".into(),
            }],
            require_userns: true,
            require_gvisor: true,
            ..DesiredState::default()
        };
        let j = |n: &Value, pool: Option<&DesiredState>| judge(&read(n, T, now()), stale, pool);
        assert_eq!(
            j(&node("True", "2026-12-01T10:05:00Z", None), None),
            Judged::Ready
        );
        assert!(
            matches!(j(&node("False", "2026-12-01T10:05:00Z", None), None), Judged::NotReady(m) if m.starts_with("SysctlMismatch: user.max_user_namespaces is 0"))
        );
        assert!(matches!(
            j(&node("Unknown", "2026-12-01T10:05:00Z", None), None),
            Judged::Unknown(_)
        ));
        // Stale: the agent stopped; its last True means nothing now.
        assert!(
            matches!(j(&node("True", "2026-12-01T09:00:00Z", None), None), Judged::Unknown(m) if m.contains("1h 10m old"))
        );
        assert!(matches!(
            j(&node("True", "garbage", None), None),
            Judged::Unknown(_)
        ));
        assert!(
            matches!(j(&json!({"metadata": {"name": "w"}}), None), Judged::Unknown(m) if m.contains("no condition"))
        );
        // With the pool's desired state: the node's must cover it.
        assert!(
            matches!(j(&node("True", "2026-12-01T10:05:00Z", None), Some(&pool)), Judged::Unknown(m) if m.contains("annotation"))
        );
        assert!(
            matches!(j(&node("True", "2026-12-01T10:05:00Z", Some(userns)), Some(&pool)), Judged::NotReady(m) if m.contains("gvisor"))
        );
        let all = r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns","gvisor"]}"#;
        assert_eq!(
            j(
                &node("True", "2026-12-01T10:05:00Z", Some(all)),
                Some(&pool)
            ),
            Judged::Ready
        );
        assert!(matches!(
            j(
                &node("True", "2026-12-01T10:05:00Z", Some("{\"v\":9}")),
                Some(&pool)
            ),
            Judged::Unknown(_)
        ));
    }
}
