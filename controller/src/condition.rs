//! What the Machine's gate condition should say, from what the controller
//! sees of its Node. Pure: every input is a value, the clock is a parameter.
//!
//! The rules (issue 22), in the order they are applied:
//! - no `status.nodeRef` → `Unknown` / `NodeNotYetAssigned`;
//! - the Machine's gate on the type has `polarity: Negative` →
//!   `Unknown` / `GatePolarityNegative` (a misconfiguration: never inverted);
//! - the workload kubeconfig refused (it runs a command, reads a file, or
//!   speaks plain HTTP or skips TLS verification without the operator's
//!   leave) → `Unknown` / `WorkloadKubeconfigRefused`;
//! - the workload cluster's Nodes not read since the controller started →
//!   the Machine's existing condition is kept (a restart or an outage never
//!   flaps a working Machine) until `--stale-after` has passed, then
//!   `Unknown` / `ConditionStale`; with no existing condition,
//!   `Unknown` / `ConditionNotYetReported`;
//! - no such Node, or the Node has no condition of the type →
//!   `Unknown` / `ConditionNotYetReported`;
//! - the Node condition's heartbeat older than `--stale-after` →
//!   `Unknown` / `ConditionStale` (the agent's heartbeat is 5 min);
//! - the condition observed on another boot than the Node's
//!   `status.nodeInfo.bootID` (the agent's `sandbox-readiness.io/verdict-boot`)
//!   → `Unknown` / `VerdictOfAnotherBoot`: a reboot nobody checked yet;
//! - the Node says `False` or `Unknown` → the same, with its reason;
//! - the Node says `True` but its `sandbox-readiness.io/desired`
//!   annotation does not cover the machine config the node booted with →
//!   `False` / `DesiredStateNotChecked`, naming the keys; no annotation, an
//!   unreadable one, or a pool the controller cannot read →
//!   `Unknown` / `DesiredStateNotChecked` (it could not check: never False);
//! - else `True`.
//!
//! Every verdict has a reason: Cluster API's v1beta2 CRD schema requires
//! one on every condition (`metav1.Condition.reason`, minLength 1).

use std::time::{Duration, SystemTime};

use sandbox_readiness::text::{clean_capped, clean_line};

/// A condition's status: the node crate's type (the agent writes the Node's
/// condition with it, the controller reads it back with the same words).
pub use sandbox_readiness::nodestatus::condition::Status;

pub const NODE_NOT_YET_ASSIGNED: &str = "NodeNotYetAssigned";
pub const CONDITION_NOT_YET_REPORTED: &str = "ConditionNotYetReported";
pub const CONDITION_STALE: &str = "ConditionStale";
pub const DESIRED_STATE_NOT_CHECKED: &str = "DesiredStateNotChecked";
pub const GATE_POLARITY_NEGATIVE: &str = "GatePolarityNegative";
pub const WORKLOAD_KUBECONFIG_REFUSED: &str = "WorkloadKubeconfigRefused";
pub const NODE_OF_ANOTHER_MACHINE: &str = "NodeOfAnotherMachine";
pub const VERDICT_OF_ANOTHER_BOOT: &str = "VerdictOfAnotherBoot";
pub const TOO_MANY_NODES: &str = "TooManyNodes";
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
    /// The workload cluster's kubeconfig was refused: why (one line).
    Refused { why: String },
    /// The workload cluster was read and has no Node of that name.
    NoNode { node: String },
    /// The Node of that name is another machine's: its providerID is not
    /// the Machine's (a name reused; Cluster API matches by providerID).
    OtherMachine {
        node: String,
        node_provider: String,
        machine_provider: String,
    },
    /// The workload cluster's cache holds `cap` Node names already; this
    /// one is past it.
    TooMany { node: String, cap: usize },
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
        NodeSeen::Refused { why } => verdict(
            Status::Unknown,
            WORKLOAD_KUBECONFIG_REFUSED,
            format!("the workload cluster's kubeconfig is refused: {why}"),
        ),
        NodeSeen::NoNode { node } => verdict(
            Status::Unknown,
            CONDITION_NOT_YET_REPORTED,
            format!("Node {node} is not in the workload cluster"),
        ),
        NodeSeen::TooMany { node, cap } => verdict(
            Status::Unknown,
            TOO_MANY_NODES,
            format!(
                "the controller keeps at most {cap} Nodes per workload cluster and this cluster's \
                 Machines name more: Node {node} is not read"
            ),
        ),
        NodeSeen::OtherMachine {
            node,
            node_provider,
            machine_provider,
        } => verdict(
            Status::Unknown,
            NODE_OF_ANOTHER_MACHINE,
            format!(
                "Node {node} is another machine's: its providerID is {node_provider}, this Machine's {machine_provider}; \
                 its condition is not this Machine's verdict"
            ),
        ),
        NodeSeen::Node {
            node,
            reading,
            pool,
        } => node_decision(node, reading, pool, now, stale_after),
    }
}

/// The condition for a Machine whose gate on `ty` has `polarity: Negative`:
/// Cluster API would read our `True` as a failure and our `False` as
/// healthy. Writing the inverse would lie to every other reader of the
/// type, so the condition says `Unknown` (the gate then never passes: the
/// rollout waits for the operator) and names the fix.
pub fn negative_gate(ty: &str) -> Verdict {
    Verdict {
        status: Status::Unknown,
        reason: GATE_POLARITY_NEGATIVE.into(),
        message: format!(
            "the Machine's readiness gate on {ty} has polarity Negative, which would count a ready node \
             as failing and a broken one as ready; the condition is not inverted: set the gate's polarity \
             to Positive (or leave it out)"
        ),
    }
}

/// How soon, by the clock alone, [`decide`] could answer differently for
/// the same inputs (a heartbeat turning stale, an outage passing
/// `--stale-after`, a grace ending): the reconciler requeues then, and at
/// no other time unless something changes.
pub fn recheck_in(
    seen: &NodeSeen,
    has_condition: bool,
    now: SystemTime,
    stale_after: Duration,
) -> Option<Duration> {
    let until = |t: SystemTime| t.duration_since(now).ok().filter(|d| !d.is_zero());
    match seen {
        NodeSeen::NotRead { since, pending, .. } => {
            let grace = (*pending && !has_condition).then(|| until(*since + FIRST_READ_GRACE));
            let stale = until(*since + stale_after);
            grace.flatten().or(stale)
        }
        NodeSeen::Node { reading, pool, .. } => {
            // A condition whose heartbeat will pass --stale-after.
            let stale = reading
                .condition
                .as_ref()
                .and_then(|c| c.heartbeat)
                .and_then(|hb| until(hb + stale_after));
            // A True condition waiting for its annotation or its pool:
            // the reader's grace, or the pool's next read.
            let waiting =
                match sandbox_readiness::nodestatus::read::judge(reading, now, stale_after, pool) {
                    Judged::PoolNotYetKnown | Judged::NoAnnotation { fresh: true } => {
                        Some(Duration::from_secs(2))
                    }
                    _ => None,
                };
            match (stale, waiting) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        NodeSeen::NoNodeRef
        | NodeSeen::Refused { .. }
        | NodeSeen::NoNode { .. }
        | NodeSeen::TooMany { .. }
        | NodeSeen::OtherMachine { .. } => None,
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
    // The node's annotation against its pool's template says the node
    // checks less than it was told: False. The comparison could not be made
    // (no annotation, an unreadable one, a pool the controller cannot read):
    // Unknown, never False. A False of the controller's own making would
    // have a MachineHealthCheck remediate a node nobody found wrong, and
    // remediate its replacement again, for as long as the template is
    // unreadable; the gate holds on Unknown all the same.
    let not_checked = |m: String| verdict(Status::False, DESIRED_STATE_NOT_CHECKED, m);
    let could_not_check = |m: String| verdict(Status::Unknown, DESIRED_STATE_NOT_CHECKED, m);
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
        (Judged::AnotherBoot { verdict: was, node: current }, _) => {
            return verdict(
                Status::Unknown,
                VERDICT_OF_ANOTHER_BOOT,
                format!(
                    "Node {node}'s condition was observed on boot {was}; the node now runs boot {current} \
                     (status.nodeInfo.bootID): its verdict for this boot is not written yet"
                ),
            )
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
            return could_not_check(format!(
                "Node {node} is ready by its own desired state, but carries no \
                 sandbox-readiness.io/desired annotation to compare with its pool's"
            ))
        }
        (Judged::Unreadable(why), _) => {
            return could_not_check(format!(
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
    // The Node's text is the workload cluster's (a tenant's): one line, no
    // control or bidi characters, before it reaches a Machine condition, an
    // Event, or a terminal that prints them.
    let message = if c.message.is_empty() {
        format!("Node {}", clean_line(node))
    } else {
        format!(
            "Node {}: {}",
            clean_line(node),
            clean_capped(&c.message, MAX_MESSAGE)
        )
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
            boot: Default::default(),
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
                "a Node of another machine under the name (a reused name)",
                NodeSeen::OtherMachine {
                    node: "w1".into(),
                    node_provider: "test://old".into(),
                    machine_provider: "test://new".into(),
                },
                true,
                w(Unknown, NODE_OF_ANOTHER_MACHINE),
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
                "no annotation: could not check, Unknown",
                node(True, "R", Some(9_980), D::NoAnnotation),
                true,
                w(Unknown, DESIRED_STATE_NOT_CHECKED),
            ),
            (
                "no annotation yet (the agent writes it just after)",
                node(True, "R", Some(9_995), D::NoAnnotation),
                true,
                None,
            ),
            (
                "unreadable: could not check, Unknown",
                node(True, "R", Some(9_990), D::Unreadable),
                true,
                w(Unknown, DESIRED_STATE_NOT_CHECKED),
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

    /// A condition observed on another boot than the one the Node runs
    /// now is nobody's verdict on this boot, whatever it says; the same
    /// boot, or an agent that records none, is read as before.
    #[test]
    fn a_verdict_of_another_boot_is_unknown() {
        use Status::*;
        let on = |verdict: Option<&str>, status: Status| {
            let mut seen = node(status, "R", Some(9_990), D::Covered);
            if let NodeSeen::Node { reading, .. } = &mut seen {
                reading.boot.node = "b2".into();
                reading.boot.verdict = verdict.map(Into::into);
            }
            match decide(&seen, true, t(10_000), STALE) {
                Decision::Write(v) => Some((v.status, v.reason, v.message)),
                Decision::Keep => None,
            }
        };
        for status in [True, False] {
            let (s, reason, message) = on(Some("b1"), status).unwrap();
            assert_eq!((s, reason.as_str()), (Unknown, VERDICT_OF_ANOTHER_BOOT));
            assert!(
                message.contains("b1") && message.contains("b2"),
                "{message}"
            );
        }
        assert_eq!(on(Some("b2"), True).map(|v| v.0), Some(True));
        assert_eq!(on(None, True).map(|v| v.0), Some(True));
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

    /// The reconciler's requeue: exactly when the clock alone changes the
    /// answer, and never for what only a change can move.
    #[test]
    fn recheck_when_the_clock_changes_the_answer() {
        let now = t(10_000);
        // A True Node whose heartbeat was 100 s ago: stale in 800 s.
        let n = node(True, "R", Some(9_900), D::Covered);
        assert_eq!(
            recheck_in(&n, true, now, STALE),
            Some(Duration::from_secs(800))
        );
        // And at that moment the decision does change.
        let before = decide(&n, true, now + Duration::from_secs(799), STALE);
        let after = decide(&n, true, now + Duration::from_secs(801), STALE);
        assert_ne!(before, after);
        // An outage that began 100 s ago, the condition kept: 800 s.
        let unread = NodeSeen::NotRead {
            since: t(9_900),
            why: "down".into(),
            pending: false,
        };
        assert_eq!(
            recheck_in(&unread, true, now, STALE),
            Some(Duration::from_secs(800))
        );
        // A first list under way for a new Machine: the 10 s grace first.
        let first = NodeSeen::NotRead {
            since: t(9_996),
            why: "listing".into(),
            pending: true,
        };
        assert_eq!(
            recheck_in(&first, false, now, STALE),
            Some(Duration::from_secs(6))
        );
        // Past stale-after nothing more is due by the clock.
        let long = NodeSeen::NotRead {
            since: t(1_000),
            why: "down".into(),
            pending: false,
        };
        assert_eq!(recheck_in(&long, true, now, STALE), None);
        assert_eq!(recheck_in(&NodeSeen::NoNodeRef, true, now, STALE), None);
        // The pool not yet read: look again soon.
        assert!(recheck_in(
            &node(True, "R", Some(9_999), D::NotYetKnown),
            true,
            now,
            STALE
        )
        .is_some());
    }

    #[test]
    fn a_refused_kubeconfig_and_a_negative_gate_name_their_reason() {
        let d = decide(
            &NodeSeen::Refused {
                why: "server http://x is plain HTTP".into(),
            },
            true,
            t(0),
            STALE,
        );
        let Decision::Write(v) = d else {
            panic!("{d:?}")
        };
        assert_eq!(
            (v.status, v.reason.as_str()),
            (Status::Unknown, WORKLOAD_KUBECONFIG_REFUSED)
        );
        let v = negative_gate("sandbox-readiness.io/SandboxReady");
        assert_eq!(
            (v.status, v.reason.as_str()),
            (Status::Unknown, GATE_POLARITY_NEGATIVE)
        );
        assert!(valid_reason(&v.reason) && valid_reason(WORKLOAD_KUBECONFIG_REFUSED));
        assert!(v.message.contains("polarity to Positive"), "{}", v.message);
    }

    /// A tenant's Node text reaches the Machine as one clean line.
    #[test]
    fn node_text_is_cleaned() {
        let (reading, pool) = reading(
            Some(NodeCondition {
                status: Status::False,
                reason: "R".into(),
                message: "a\u{202E}evil\nline\u{1b}[2J".into(),
                heartbeat: Some(t(9_999)),
            }),
            D::Covered,
        );
        let d = decide(
            &NodeSeen::Node {
                node: "w1".into(),
                reading,
                pool,
            },
            true,
            t(10_000),
            STALE,
        );
        let Decision::Write(v) = d else {
            panic!("{d:?}")
        };
        assert!(
            !v.message.chars().any(|c| c.is_control() || c == '\u{202E}'),
            "{:?}",
            v.message
        );
        assert!(v.message.contains("evil line"), "{:?}", v.message);
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
