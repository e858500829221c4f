//! What the Machine's gate condition should say, from what the controller
//! sees of its Node. Pure: every input is a value, the clock is a parameter.
//!
//! The rules (issue 22), in the order they are applied:
//! - no `status.nodeRef` → `Unknown` / `NodeNotYetAssigned`;
//! - the workload cluster's Nodes not read since the controller started →
//!   the Machine's existing condition is kept (a restart or an outage never
//!   flaps a working Machine) until `--stale-after` has passed, then
//!   `Unknown` / `ConditionStale`; with no existing condition,
//!   `Unknown` / `ConditionNotYetReported`;
//! - no such Node, or the Node has no condition of the type →
//!   `Unknown` / `ConditionNotYetReported`;
//! - the Node condition's heartbeat older than `--stale-after` →
//!   `Unknown` / `ConditionStale` (the agent's heartbeat is 5 min);
//! - the Node says `False` or `Unknown` → the same, with its reason;
//! - the Node says `True` but its `sandbox-readiness.io/desired`
//!   annotation does not cover the machine config the node booted with →
//!   `False` / `DesiredStateNotChecked`, naming the keys;
//! - else `True`.
//!
//! Every verdict has a reason: Cluster API's v1beta2 CRD schema requires
//! one on every condition (`metav1.Condition.reason`, minLength 1).

use std::time::{Duration, SystemTime};

/// A condition's status: the node crate's type (the agent writes the Node's
/// condition with it, the controller reads it back with the same words).
pub use sandbox_readiness::nodestatus::condition::Status;

pub const NODE_NOT_YET_ASSIGNED: &str = "NodeNotYetAssigned";
pub const CONDITION_NOT_YET_REPORTED: &str = "ConditionNotYetReported";
pub const CONDITION_STALE: &str = "ConditionStale";
pub const DESIRED_STATE_NOT_CHECKED: &str = "DesiredStateNotChecked";
/// Reasons used when the Node's own condition carries none (the agent
/// always writes one; another writer might not).
pub const NODE_READY_FALLBACK: &str = "NodeSandboxReady";
pub const NODE_NOT_READY_FALLBACK: &str = "NodeSandboxNotReady";
pub const NODE_UNKNOWN_FALLBACK: &str = "NodeSandboxUnknown";

/// How long a `True` condition without an annotation is left alone: the
/// node crate's reader decides it.
pub use sandbox_readiness::nodestatus::read::ANNOTATION_GRACE;

/// Longest message written (the schema allows 32768; an Event's note 1 kB).
pub const MAX_MESSAGE: usize = 1000;

/// The Node's condition of the controller's type, as read by the node
/// crate's reader (the one `check --from-node-conditions` uses).
pub use sandbox_readiness::nodestatus::read::{Judged, Pool, Reading, Seen as NodeCondition};

/// What the controller sees of a Machine's Node.
// One value per Machine and round, built and decided at once, never held in
// a collection: boxing the Node variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum NodeSeen {
    /// The Machine has no `status.nodeRef`.
    NoNodeRef,
    /// The workload cluster's Nodes have not been read since `since`
    /// (controller start, or the first failure to reach it). `pending`:
    /// a connection's first Node list is under way and nothing has failed.
    NotRead {
        since: SystemTime,
        why: String,
        pending: bool,
    },
    /// The workload cluster was read and has no Node of that name.
    NoNode { node: String },
    /// The Node as read, and what it is judged against: the desired state
    /// read from the machine config the node booted with (the pool is read
    /// only when the Node says `True`; else [`Pool::Own`]).
    Node {
        node: String,
        reading: Reading,
        pool: Pool,
    },
}

/// A condition the controller wants on the Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    pub reason: String,
    pub message: String,
}

/// What to do with the Machine's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Write(Verdict),
    /// Leave the Machine's condition as it is.
    Keep,
}

fn verdict(status: Status, reason: &str, message: String) -> Decision {
    Decision::Write(Verdict {
        status,
        reason: reason.to_string(),
        message: bound(message),
    })
}

/// Cuts a message to [`MAX_MESSAGE`] bytes at a character boundary.
pub fn bound(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// A condition reason must match `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
/// (metav1.Condition's validation); a Node's reason that does not is replaced.
fn valid_reason(r: &str) -> bool {
    let b = r.as_bytes();
    !b.is_empty()
        && b.len() <= 1024
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        && !matches!(b[b.len() - 1], b',' | b':')
}

/// How long a Machine without a condition waits for its workload cluster's
/// first Node list (when nothing has failed) before `Unknown` is written.
pub const FIRST_READ_GRACE: Duration = Duration::from_secs(10);

/// Decides the Machine's condition. `has_condition`: the Machine already
/// carries a condition of the type (then an unread workload keeps it).
pub fn decide(
    seen: &NodeSeen,
    has_condition: bool,
    now: SystemTime,
    stale_after: Duration,
) -> Decision {
    match seen {
        NodeSeen::NoNodeRef => verdict(
            Status::Unknown,
            NODE_NOT_YET_ASSIGNED,
            "the Machine has no Node yet (status.nodeRef is not set)".into(),
        ),
        NodeSeen::NotRead {
            since,
            why,
            pending,
        } => {
            let waited = now.duration_since(*since).unwrap_or_default();
            if waited < stale_after && has_condition {
                Decision::Keep
            } else if *pending && waited < FIRST_READ_GRACE {
                // The first list of a reachable cluster takes about a
                // second; writing Unknown now would be a second write for
                // each new Machine when its verdict follows (1,000 at a
                // controller start). Cluster API already counts a gate
                // without its condition as not ready, so holding costs only
                // the reason, for a few seconds.
                Decision::Keep
            } else if waited < stale_after {
                verdict(
                    Status::Unknown,
                    CONDITION_NOT_YET_REPORTED,
                    format!("the workload cluster's Nodes have not been read yet: {why}"),
                )
            } else {
                // No clock in the message: a message that grew with the
                // outage would be a new write every pass (and Cluster API
                // copies it into Ready, another), for every stale Machine.
                verdict(
                    Status::Unknown,
                    CONDITION_STALE,
                    format!(
                        "the workload cluster's Nodes could not be read for more than {}: {why}",
                        humantime::format_duration(stale_after)
                    ),
                )
            }
        }
        NodeSeen::NoNode { node } => verdict(
            Status::Unknown,
            CONDITION_NOT_YET_REPORTED,
            format!("Node {node} is not in the workload cluster"),
        ),
        NodeSeen::Node {
            node,
            reading,
            pool,
        } => node_decision(node, reading, pool, now, stale_after),
    }
}

/// A Node's verdict, judged by the node crate's reader
/// ([`sandbox_readiness::nodestatus::read::judge`]), worded as a Machine
/// condition with the controller's reasons.
fn node_decision(
    node: &str,
    reading: &Reading,
    pool: &Pool,
    now: SystemTime,
    stale_after: Duration,
) -> Decision {
    let judged = sandbox_readiness::nodestatus::read::judge(reading, now, stale_after, pool);
    let not_checked = |m: String| verdict(Status::False, DESIRED_STATE_NOT_CHECKED, m);
    let c = match (&judged, &reading.condition) {
        (Judged::NoCondition, _) | (_, None) => {
            return verdict(
                Status::Unknown,
                CONDITION_NOT_YET_REPORTED,
                format!("Node {node} has no sandbox readiness condition yet"),
            )
        }
        (Judged::Stale(_), _) => {
            // The age stays out of the message (see the NotRead case).
            return verdict(
                Status::Unknown,
                CONDITION_STALE,
                format!(
                    "Node {node}'s condition has not been written for more than {}",
                    humantime::format_duration(stale_after)
                ),
            );
        }
        (Judged::NoHeartbeat, _) => {
            return verdict(
                Status::Unknown,
                CONDITION_STALE,
                format!("Node {node}'s condition has no heartbeat time"),
            )
        }
        (Judged::PoolNotYetKnown | Judged::NoAnnotation { fresh: true }, _) => {
            return Decision::Keep
        }
        (Judged::NoAnnotation { fresh: false }, _) => {
            return not_checked(format!(
                "Node {node} is ready by its own desired state, but carries no \
                 sandbox-readiness.io/desired annotation to compare with its pool's"
            ))
        }
        (Judged::Unreadable(why), _) => {
            return not_checked(format!(
                "Node {node}: its desired state cannot be compared with its pool's: {why}"
            ))
        }
        (Judged::Uncovered(keys), _) => {
            return not_checked(format!(
                "Node {node} does not check what its pool's machine config sets: {}",
                keys.join("; ")
            ))
        }
        (Judged::Said(_), Some(c)) => c,
    };
    let reason = |fallback: &'static str| {
        if valid_reason(&c.reason) {
            c.reason.clone()
        } else {
            fallback.to_string()
        }
    };
    let message = if c.message.is_empty() {
        format!("Node {node}")
    } else {
        format!("Node {node}: {}", c.message)
    };
    let fallback = match c.status {
        Status::True => NODE_READY_FALLBACK,
        Status::False => NODE_NOT_READY_FALLBACK,
        Status::Unknown => NODE_UNKNOWN_FALLBACK,
    };
    verdict(c.status, &reason(fallback), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_readiness::proto::v1::{DesiredState, SysctlExpectation};

    const STALE: Duration = Duration::from_secs(900);

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    /// What the node's annotation says against its pool's.
    #[derive(Clone, Copy)]
    enum D {
        Covered,
        Uncovered,
        NoAnnotation,
        Unreadable,
        NotYetKnown,
    }

    fn pool_state() -> DesiredState {
        DesiredState {
            sysctls: vec![SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: "11255".into(),
            }],
            ..DesiredState::default()
        }
    }

    fn reading(condition: Option<NodeCondition>, d: D) -> (Reading, Pool) {
        let known = Pool::Known(pool_state());
        let (desired, pool) = match d {
            D::Covered => (Some(Ok(pool_state())), known),
            D::Uncovered => (Some(Ok(DesiredState::default())), known),
            D::NoAnnotation => (None, known),
            D::Unreadable => (Some(Err("bad".to_string())), known),
            D::NotYetKnown => (Some(Ok(pool_state())), Pool::NotYetKnown),
        };
        let r = Reading {
            name: "w1".into(),
            condition,
            desired,
        };
        (r, pool)
    }

    fn node(status: Status, reason: &str, hb: Option<u64>, d: D) -> NodeSeen {
        let (reading, pool) = reading(
            Some(NodeCondition {
                status,
                reason: reason.into(),
                message: "m".into(),
                heartbeat: hb.map(t),
            }),
            d,
        );
        NodeSeen::Node {
            node: "w1".into(),
            reading,
            pool,
        }
    }

    fn w(status: Status, reason: &str) -> Option<(Status, String)> {
        Some((status, reason.to_string()))
    }

    #[test]
    fn table() {
        use Status::*;
        let now = t(10_000);
        type Case = (&'static str, NodeSeen, bool, Option<(Status, String)>);
        let cases: Vec<Case> = vec![
            (
                "no nodeRef",
                NodeSeen::NoNodeRef,
                true,
                w(Unknown, NODE_NOT_YET_ASSIGNED),
            ),
            (
                "workload unread, condition kept",
                NodeSeen::NotRead {
                    since: t(9_500),
                    why: "down".into(),
                    pending: false,
                },
                true,
                None,
            ),
            (
                "workload unread, nothing to keep",
                NodeSeen::NotRead {
                    since: t(9_500),
                    why: "down".into(),
                    pending: false,
                },
                false,
                w(Unknown, CONDITION_NOT_YET_REPORTED),
            ),
            (
                "first list under way, nothing to keep: wait",
                NodeSeen::NotRead {
                    since: t(9_995),
                    why: "the Node list has not completed yet".into(),
                    pending: true,
                },
                false,
                None,
            ),
            (
                "first list under way past the grace",
                NodeSeen::NotRead {
                    since: t(9_989),
                    why: "the Node list has not completed yet".into(),
                    pending: true,
                },
                false,
                w(Unknown, CONDITION_NOT_YET_REPORTED),
            ),
            (
                "workload unread past stale-after",
                NodeSeen::NotRead {
                    since: t(9_000 - 900),
                    why: "down".into(),
                    pending: false,
                },
                true,
                w(Unknown, CONDITION_STALE),
            ),
            (
                "no Node",
                NodeSeen::NoNode { node: "w1".into() },
                true,
                w(Unknown, CONDITION_NOT_YET_REPORTED),
            ),
            (
                "no condition",
                {
                    let (reading, pool) = reading(None, D::Covered);
                    NodeSeen::Node {
                        node: "w1".into(),
                        reading,
                        pool,
                    }
                },
                false,
                w(Unknown, CONDITION_NOT_YET_REPORTED),
            ),
            (
                "true, covered",
                node(True, "SandboxReady", Some(9_990), D::Covered),
                false,
                w(True, "SandboxReady"),
            ),
            (
                "true at exactly stale-after",
                node(True, "R", Some(10_000 - 900), D::Covered),
                false,
                w(True, "R"),
            ),
            (
                "stale heartbeat",
                node(True, "R", Some(10_000 - 901), D::Covered),
                true,
                w(Unknown, CONDITION_STALE),
            ),
            (
                "no heartbeat",
                node(True, "R", None, D::Covered),
                true,
                w(Unknown, CONDITION_STALE),
            ),
            (
                "heartbeat in the future",
                node(True, "R", Some(10_100), D::Covered),
                true,
                w(True, "R"),
            ),
            (
                "false",
                node(False, "SysctlMismatch", Some(9_990), D::Covered),
                true,
                w(False, "SysctlMismatch"),
            ),
            (
                "false wins over uncovered",
                node(False, "SysctlMismatch", Some(9_990), D::Uncovered),
                true,
                w(False, "SysctlMismatch"),
            ),
            (
                "unknown",
                node(Unknown, "CanaryNotRun", Some(9_990), D::Covered),
                true,
                w(Unknown, "CanaryNotRun"),
            ),
            (
                "false without reason",
                node(False, "", Some(9_990), D::Covered),
                true,
                w(False, NODE_NOT_READY_FALLBACK),
            ),
            (
                "bad reason replaced",
                node(True, "not a reason!", Some(9_990), D::Covered),
                true,
                w(True, NODE_READY_FALLBACK),
            ),
            (
                "reason ending in colon",
                node(Unknown, "Bad:", Some(9_990), D::Covered),
                true,
                w(Unknown, NODE_UNKNOWN_FALLBACK),
            ),
            (
                "uncovered",
                node(True, "R", Some(9_990), D::Uncovered),
                true,
                w(False, DESIRED_STATE_NOT_CHECKED),
            ),
            (
                "no annotation",
                node(True, "R", Some(9_980), D::NoAnnotation),
                true,
                w(False, DESIRED_STATE_NOT_CHECKED),
            ),
            (
                "no annotation yet (the agent writes it just after)",
                node(True, "R", Some(9_995), D::NoAnnotation),
                true,
                None,
            ),
            (
                "unreadable",
                node(True, "R", Some(9_990), D::Unreadable),
                true,
                w(False, DESIRED_STATE_NOT_CHECKED),
            ),
            (
                "pool not yet known",
                node(True, "R", Some(9_990), D::NotYetKnown),
                true,
                None,
            ),
        ];
        for (name, seen, has, want) in cases {
            let got = match decide(&seen, has, now, STALE) {
                Decision::Keep => None,
                Decision::Write(v) => {
                    assert!(!v.reason.is_empty(), "{name}: empty reason");
                    assert!(valid_reason(&v.reason), "{name}: reason {}", v.reason);
                    assert!(v.message.len() <= MAX_MESSAGE, "{name}");
                    Some((v.status, v.reason))
                }
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn uncovered_message_names_the_keys() {
        let seen = node(True, "R", Some(9_990), D::Uncovered);
        let Decision::Write(v) = decide(&seen, false, t(10_000), STALE) else {
            panic!("expected a write")
        };
        assert!(
            v.message.contains("user.max_user_namespaces"),
            "{}",
            v.message
        );
        assert!(v.message.contains("11255"), "{}", v.message);
    }

    /// A stale verdict says the same at every pass of an outage: the
    /// planner then writes it once, not once a pass with a growing age.
    #[test]
    fn a_stale_verdict_carries_no_clock() {
        let decided = |now: u64| match decide(
            &node(True, "R", Some(1_000), D::Covered),
            true,
            t(now),
            STALE,
        ) {
            Decision::Write(v) => v,
            d => panic!("expected a write, got {d:?}"),
        };
        assert_eq!(decided(1_000 + 901), decided(1_000 + 7_200));
        let unread = |now: u64| match decide(
            &NodeSeen::NotRead {
                since: t(1_000),
                why: "connection refused".into(),
                pending: false,
            },
            true,
            t(now),
            STALE,
        ) {
            Decision::Write(v) => v,
            d => panic!("expected a write, got {d:?}"),
        };
        let (a, b) = (unread(1_000 + 901), unread(1_000 + 7_200));
        assert_eq!(a, b);
        assert_eq!(a.reason, CONDITION_STALE, "{a:?}");
        assert!(a.message.contains("more than 15m"), "{}", a.message);
    }

    #[test]
    fn messages_are_bounded_at_a_char_boundary() {
        let long = "é".repeat(2000);
        let b = bound(long);
        assert!(b.len() <= MAX_MESSAGE);
        assert!(b.ends_with("..."));
        assert_eq!(bound("short".into()), "short");
    }

    #[test]
    fn status_words() {
        for s in [Status::True, Status::False, Status::Unknown] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("true"), None);
    }
    use Status::*;
}
