//! The pool as the watchers last saw it: watcher events in, per-node
//! status, [`Change`]s and results out. Pure: no I/O, no clock reads except
//! through the `now` given; [`super::wait::PoolWatch`] feeds it.

use std::{collections::BTreeMap, fmt, time::Duration};

use tokio::time::Instant;

use super::{
    nodes::Node,
    result::{first_finding, node_reason, Answer, AskError, Counts, NodeResult},
};
use crate::text::fmt_duration;

/// What a watcher task reports.
#[derive(Debug, Clone)]
pub struct Event {
    pub(crate) key: String,
    pub(crate) epoch: u64,
    pub(crate) kind: EventKind,
}

#[derive(Debug, Clone)]
pub(crate) enum EventKind {
    Answer(Box<Answer>),
    Failed {
        error: AskError,
        retry_in: Option<Duration>,
    },
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeStatus {
    /// Watched, nothing heard yet.
    Waiting,
    Answered(Box<Answer>),
    Failed {
        error: AskError,
        /// `None` when the watcher gave up (nothing can change without a new node set).
        retry_in: Option<Duration>,
    },
}

/// One node of the pool.
#[derive(Debug, Clone)]
pub struct Entry {
    pub node: Node,
    pub status: NodeStatus,
    /// The last boot id seen.
    pub boot_id: Option<String>,
    pub boot_id_changes: u32,
    /// When the status was last set, from the start of the watch.
    pub updated: Duration,
    epoch: u64,
}

/// Something a person (or a controller) may want to hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Added {
        name: String,
        address: String,
    },
    Removed {
        name: String,
    },
    Converged {
        name: String,
    },
    NotConverged {
        name: String,
        reason: String,
    },
    Unreachable {
        name: String,
        error: String,
        retry_in: Option<Duration>,
    },
    BootIdChanged {
        name: String,
        old: String,
        new: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Added { name, address } if name == address => write!(f, "{name}: added"),
            Change::Added { name, address } => write!(f, "{name}: added ({address})"),
            Change::Removed { name } => write!(f, "{name}: removed (no longer listed)"),
            Change::Converged { name } => write!(f, "{name}: converged"),
            Change::NotConverged { name, reason } => write!(f, "{name}: not converged: {reason}"),
            Change::Unreachable {
                name,
                error,
                retry_in: Some(d),
            } => write!(f, "{name}: {error} (retrying in {})", fmt_duration(*d)),
            Change::Unreachable {
                name,
                error,
                retry_in: None,
            } => write!(f, "{name}: {error}"),
            Change::BootIdChanged { name, old, new } => write!(
                f,
                "{name}: boot id changed {} → {} (rebooted or replaced)",
                short(old),
                short(new)
            ),
        }
    }
}

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

/// The pool as the watchers last saw it. Pure: no I/O, no clock reads
/// except through the `now` given.
#[derive(Debug)]
pub struct PoolState {
    started: Instant,
    entries: BTreeMap<String, Entry>,
}

impl PoolState {
    pub fn new(started: Instant) -> Self {
        PoolState {
            started,
            entries: BTreeMap::new(),
        }
    }

    pub(crate) fn add(&mut self, key: String, node: Node, epoch: u64, now: Instant) -> Change {
        let change = Change::Added {
            name: node.name.clone(),
            address: node.address_display(),
        };
        self.entries.insert(
            key,
            Entry {
                node,
                status: NodeStatus::Waiting,
                boot_id: None,
                boot_id_changes: 0,
                updated: now.saturating_duration_since(self.started),
                epoch,
            },
        );
        change
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<Change> {
        self.entries
            .remove(key)
            .map(|e| Change::Removed { name: e.node.name })
    }

    /// Applies one watcher event; events from a watcher since replaced (an
    /// older epoch) or removed are ignored.
    pub fn apply(&mut self, ev: Event, now: Instant) -> Vec<Change> {
        let since = now.saturating_duration_since(self.started);
        let Some(entry) = self
            .entries
            .get_mut(&ev.key)
            .filter(|e| e.epoch == ev.epoch)
        else {
            return Vec::new();
        };
        let name = entry.node.name.clone();
        let mut changes = Vec::new();
        match ev.kind {
            EventKind::Answer(answer) => {
                let boot = answer.boot_id().to_string();
                if !boot.is_empty() {
                    if let Some(old) = entry.boot_id.as_ref().filter(|old| **old != boot) {
                        changes.push(Change::BootIdChanged {
                            name: name.clone(),
                            old: old.clone(),
                            new: boot.clone(),
                        });
                        entry.boot_id_changes += 1;
                    }
                    entry.boot_id = Some(boot);
                }
                let line = |a: &Answer| {
                    (
                        a.verdict.converged,
                        first_finding(&a.verdict).map(|f| f.message.clone()),
                    )
                };
                let before = match &entry.status {
                    NodeStatus::Answered(a) => Some(line(a)),
                    _ => None,
                };
                let after = line(&answer);
                if before.as_ref() != Some(&after) {
                    changes.push(if answer.verdict.converged {
                        Change::Converged { name }
                    } else {
                        Change::NotConverged {
                            name,
                            reason: node_reason(&Ok(answer.as_ref().clone())),
                        }
                    });
                }
                if before.is_none() || before.as_ref() != Some(&after) {
                    entry.updated = since;
                }
                entry.status = NodeStatus::Answered(answer);
            }
            EventKind::Failed { error, retry_in } => {
                let repeated =
                    matches!(&entry.status, NodeStatus::Failed { error: e, .. } if *e == error);
                if !repeated {
                    changes.push(Change::Unreachable {
                        name,
                        error: error.to_string(),
                        retry_in,
                    });
                    entry.updated = since;
                }
                entry.status = NodeStatus::Failed { error, retry_in };
            }
        }
        changes
    }

    /// Judges every report held again against a new desired state (each
    /// report is what its agent last said; the new question is ours).
    /// Returns the nodes whose verdict line changed.
    pub fn rejudge(&mut self, desired: &crate::proto::v1::DesiredState) -> Vec<Change> {
        let mut changes = Vec::new();
        for entry in self.entries.values_mut() {
            let NodeStatus::Answered(old) = &entry.status else {
                continue;
            };
            let new = Answer::judge(desired, old.report.clone(), None);
            let line = |a: &Answer| {
                (
                    a.verdict.converged,
                    first_finding(&a.verdict).map(|f| f.message.clone()),
                )
            };
            if line(old) != line(&new) {
                let name = entry.node.name.clone();
                changes.push(if new.verdict.converged {
                    Change::Converged { name }
                } else {
                    Change::NotConverged {
                        name,
                        reason: node_reason(&Ok(new.clone())),
                    }
                });
            }
            entry.status = NodeStatus::Answered(Box::new(new));
        }
        changes
    }

    /// The watcher for `key` was replaced: only the new one's events count.
    pub(crate) fn set_epoch(&mut self, key: &str, epoch: u64) {
        if let Some(e) = self.entries.get_mut(key) {
            e.epoch = epoch;
        }
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            total: self.entries.len(),
            ..Counts::default()
        };
        for e in self.entries.values() {
            match &e.status {
                NodeStatus::Waiting => c.waiting += 1,
                NodeStatus::Answered(a) if a.verdict.converged => c.converged += 1,
                NodeStatus::Answered(_) => {}
                NodeStatus::Failed { .. } => c.unreachable += 1,
            }
        }
        c
    }

    /// True when there is at least one node and every node's latest report
    /// converged. A node whose stream broke counts as not converged until
    /// it answers again: its last answer may describe a machine now gone.
    pub fn all_converged(&self) -> bool {
        let c = self.counts();
        c.total > 0 && c.converged == c.total
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub(crate) fn entries_with_keys(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter()
    }

    /// One result per node, as [`Client::check_nodes`](super::client::Client::check_nodes) would give.
    pub fn results(&self) -> Vec<NodeResult> {
        self.entries
            .values()
            .map(|e| NodeResult {
                node: e.node.clone(),
                outcome: match &e.status {
                    NodeStatus::Waiting => Err(AskError::NoAnswerYet),
                    NodeStatus::Answered(a) => Ok(a.as_ref().clone()),
                    NodeStatus::Failed { error, .. } => Err(error.clone()),
                },
                elapsed: e.updated,
                boot_id_changes: e.boot_id_changes,
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::fleet::nodes::parse_entry;
    use crate::proto::v1::{Finding, NodeIdentity, Report, Verdict};

    fn answer(converged: bool, boot: &str, finding: &str) -> Box<Answer> {
        Box::new(Answer {
            verdict: Verdict {
                converged,
                findings: (!finding.is_empty())
                    .then(|| Finding {
                        code: "SYSCTL_MISMATCH".into(),
                        message: finding.into(),
                        blocking: true,
                        ..Finding::default()
                    })
                    .into_iter()
                    .collect(),
            },
            report: Report {
                node: Some(NodeIdentity {
                    boot_id: boot.into(),
                    ..NodeIdentity::default()
                }),
                ..Report::default()
            },
        })
    }

    fn ev(key: &str, epoch: u64, kind: EventKind) -> Event {
        Event {
            key: key.into(),
            epoch,
            kind,
        }
    }

    #[test]
    fn a_new_desired_state_judges_the_reports_held_again() {
        use crate::proto::v1::{DesiredState, Sysctl, SysctlExpectation, SysctlState};
        let t0 = Instant::now();
        let mut s = PoolState::new(t0);
        s.add("k".into(), parse_entry("node-1", 1).unwrap(), 1, t0);
        let mut a = answer(true, "b1", "");
        a.report.sysctls = vec![Sysctl {
            name: "user.max_user_namespaces".into(),
            value: "11255".into(),
            state: SysctlState::Present as i32,
            ..Sysctl::default()
        }];
        s.apply(ev("k", 1, EventKind::Answer(a)), t0);
        let want = |v: &str| DesiredState {
            sysctls: vec![SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: v.into(),
            }],
            ..DesiredState::default()
        };
        let c = s.rejudge(&want("0"));
        assert!(
            matches!(&c[..], [Change::NotConverged { reason, .. }] if reason.contains("expected 0")),
            "{c:?}"
        );
        assert!(!s.all_converged());
        assert_eq!(s.rejudge(&want("0")), []);
        assert_eq!(
            s.rejudge(&want("11255")),
            [Change::Converged {
                name: "node-1".into()
            }]
        );
        assert!(s.all_converged());
        // The replaced watcher's events no longer count.
        s.set_epoch("k", 2);
        assert!(s
            .apply(ev("k", 1, EventKind::Answer(answer(false, "b1", "x"))), t0)
            .is_empty());
    }

    #[test]
    fn state_reports_only_real_changes() {
        let t0 = Instant::now();
        let mut s = PoolState::new(t0);
        let n = parse_entry("node-1", 1).unwrap();
        assert_eq!(
            s.add("k".into(), n, 1, t0),
            Change::Added {
                name: "node-1".into(),
                address: "node-1:1".into()
            }
        );
        assert!(!s.all_converged());
        let off = || {
            EventKind::Answer(answer(
                false,
                "b1",
                "user.max_user_namespaces is 0, expected 11255",
            ))
        };
        let c = s.apply(ev("k", 1, off()), t0);
        assert_eq!(
            c,
            [Change::NotConverged {
                name: "node-1".into(),
                reason: "user.max_user_namespaces is 0, expected 11255".into()
            }]
        );
        // A heartbeat with the same state says nothing.
        assert!(s.apply(ev("k", 1, off()), t0).is_empty());
        // Stale epochs and unknown keys are ignored.
        assert!(s
            .apply(ev("k", 0, EventKind::Answer(answer(true, "b1", ""))), t0)
            .is_empty());
        assert!(s
            .apply(ev("x", 1, EventKind::Answer(answer(true, "b1", ""))), t0)
            .is_empty());
        let fail = || EventKind::Failed {
            error: AskError::Refused,
            retry_in: Some(Duration::from_secs(1)),
        };
        assert_eq!(s.apply(ev("k", 1, fail()), t0).len(), 1);
        assert!(
            s.apply(ev("k", 1, fail()), t0).is_empty(),
            "repeat errors are quiet"
        );
        assert_eq!(
            s.counts(),
            Counts {
                total: 1,
                converged: 0,
                unreachable: 1,
                waiting: 0
            }
        );
        let c = s.apply(ev("k", 1, EventKind::Answer(answer(true, "b2", ""))), t0);
        assert_eq!(
            c,
            [
                Change::BootIdChanged {
                    name: "node-1".into(),
                    old: "b1".into(),
                    new: "b2".into()
                },
                Change::Converged {
                    name: "node-1".into()
                }
            ]
        );
        assert!(s.all_converged());
        let r = s.results();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].boot_id_changes, 1);
        assert!(r[0].converged());
        assert_eq!(
            s.remove("k"),
            Some(Change::Removed {
                name: "node-1".into()
            })
        );
        assert!(!s.all_converged(), "an empty pool never converged");
    }
}
