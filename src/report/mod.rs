//! The observed state: fingerprint, generation and change descriptions over
//! the generated `Report` type, and ([`derive()`]) the one step that computes
//! every derived field from the observer's raw facts.
//!
//! The fingerprint hashes everything observed except what changes on every
//! observation anyway (timestamps, durations, counters), so two observations
//! of an unchanged node have the same fingerprint and the generation only
//! moves when the node really changed.

pub mod carry;
pub mod derive;
pub mod gvisor;
pub mod names;
pub mod preconditions;

pub use carry::{is_agent_resource_errno, keep_last_good, sysctl_read_hit_agent_limits};
pub use derive::{derive, Facts};

use prost::Message;

use crate::proto::v1::{Gvisor, GvisorReadiness, Probe, ProbeOutcome, Report, Sysctl, SysctlState};

/// Stable hash of the observed state (hex SHA-256, first 128 bits).
pub fn fingerprint(report: &Report) -> String {
    let mut r = report.clone();
    r.observed_at = None;
    r.generation = 0;
    r.fingerprint.clear();
    r.agent = None;
    if let Some(u) = r.user_namespaces.as_mut() {
        strip_probe(u.userns_create.as_mut());
        strip_probe(u.idmap_mount.as_mut());
        strip_probe(u.runtime_state_idmap.as_mut());
    }
    if let Some(g) = r.gvisor.as_mut() {
        strip_probe(g.sandbox.as_mut());
        if let Some(c) = g.cri.as_mut() {
            c.duration = None;
        }
    }
    // A canary's sandbox id is new on every run, like its times.
    for c in &mut r.canaries {
        strip_probe(c.result.as_mut());
        c.sandbox_id.clear();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &r.encode_to_vec());
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn strip_probe(p: Option<&mut Probe>) {
    if let Some(p) = p {
        p.duration = None;
        p.ran_at = None;
    }
}

/// Assigns `generation` and `fingerprint`: the generation increases only when
/// the fingerprint differs from the previous observation's.
#[derive(Debug, Default)]
pub struct Generations {
    last: Option<String>,
    generation: u64,
}

impl Generations {
    /// Stamps `report`; returns true when it differs from the previous one.
    pub fn stamp(&mut self, report: &mut Report) -> bool {
        let fp = fingerprint(report);
        let changed = self.last.as_deref() != Some(fp.as_str());
        if changed {
            self.generation += 1;
            self.last = Some(fp.clone());
        }
        report.generation = self.generation;
        report.fingerprint = fp;
        changed
    }
}

/// The value of a sysctl as a short display string.
pub fn sysctl_display(s: &Sysctl) -> String {
    match s.state() {
        SysctlState::Present => s.value.clone(),
        SysctlState::Absent => "absent".into(),
        SysctlState::Unreadable => "unreadable".into(),
        SysctlState::Withheld => "withheld".into(),
        SysctlState::Unspecified => "?".into(),
    }
}

/// Every sysctl in the report, user namespace ones first.
pub fn all_sysctls(report: &Report) -> impl Iterator<Item = &Sysctl> {
    report
        .user_namespaces
        .iter()
        .flat_map(|u| u.sysctls.iter())
        .chain(report.sysctls.iter())
}

/// Finds a sysctl by name.
pub fn find_sysctl<'a>(report: &'a Report, name: &str) -> Option<&'a Sysctl> {
    all_sysctls(report).find(|s| s.name == name)
}

/// A probe outcome as a word.
pub fn outcome_word(p: Option<&Probe>) -> &'static str {
    match p.map(|p| p.outcome()) {
        Some(ProbeOutcome::Passed) => "passed",
        Some(ProbeOutcome::Failed) => "failed",
        Some(ProbeOutcome::Skipped) => "skipped",
        Some(ProbeOutcome::Error) => "error",
        Some(ProbeOutcome::Inconclusive) => "inconclusive",
        Some(ProbeOutcome::Unspecified) | None => "not run",
    }
}

/// The gVisor summary as a word.
pub fn readiness_word(g: Option<&Gvisor>) -> &'static str {
    match g.map(|g| g.readiness()) {
        Some(GvisorReadiness::Ready) => "READY",
        Some(GvisorReadiness::NotReady) => "NOT_READY",
        Some(GvisorReadiness::NotInstalled) => "NOT_INSTALLED",
        Some(GvisorReadiness::Unknown) => "UNKNOWN",
        Some(GvisorReadiness::Unspecified) | None => "not observed",
    }
}

/// What changed between two observations, one line each ("old → new"), for
/// the log. Empty when nothing a person cares about changed.
pub fn changes(old: &Report, new: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for s in all_sysctls(new) {
        let before = find_sysctl(old, &s.name).map(sysctl_display);
        let after = sysctl_display(s);
        if before.as_deref() != Some(after.as_str()) {
            out.push(format!(
                "{}: {} → {}",
                s.name,
                before.unwrap_or_else(|| "unobserved".into()),
                after
            ));
        }
    }
    let probes = |r: &Report| {
        let u = r.user_namespaces.as_ref();
        [
            (
                "userns probe",
                outcome_word(u.and_then(|u| u.userns_create.as_ref())),
            ),
            (
                "idmap probe",
                outcome_word(u.and_then(|u| u.idmap_mount.as_ref())),
            ),
            (
                "sandbox probe",
                outcome_word(r.gvisor.as_ref().and_then(|g| g.sandbox.as_ref())),
            ),
            ("gvisor", readiness_word(r.gvisor.as_ref())),
        ]
    };
    for ((name, a), (_, b)) in probes(old).into_iter().zip(probes(new)) {
        if a != b {
            out.push(format!("{name}: {a} → {b}"));
        }
    }
    let reasons = |r: &Report| {
        r.gvisor
            .as_ref()
            .map(|g| g.reasons.clone())
            .unwrap_or_default()
    };
    if reasons(old) != reasons(new) {
        out.push(format!("gvisor reasons: {:?}", reasons(new)));
    }
    let boot = |r: &Report| {
        r.node
            .as_ref()
            .map(|n| n.boot_id.clone())
            .unwrap_or_default()
    };
    if boot(old) != boot(new) {
        out.push(format!("boot id: {} → {}", boot(old), boot(new)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::UserNamespaces;

    fn report(limit: &str, micros: i32) -> Report {
        Report {
            observed_at: Some(pbjson_types::Timestamp {
                seconds: i64::from(micros),
                nanos: 0,
            }),
            user_namespaces: Some(UserNamespaces {
                sysctls: vec![Sysctl {
                    name: "user.max_user_namespaces".into(),
                    state: SysctlState::Present as i32,
                    value: limit.into(),
                    error: String::new(),
                }],
                userns_create: Some(Probe {
                    outcome: ProbeOutcome::Passed as i32,
                    duration: Some(pbjson_types::Duration {
                        seconds: 0,
                        nanos: micros,
                    }),
                    ..Probe::default()
                }),
                ..UserNamespaces::default()
            }),
            ..Report::default()
        }
    }

    #[test]
    fn fingerprint_ignores_time_but_not_values() {
        assert_eq!(fingerprint(&report("0", 1)), fingerprint(&report("0", 2)));
        assert_ne!(
            fingerprint(&report("0", 1)),
            fingerprint(&report("11255", 1))
        );
    }

    #[test]
    fn generation_moves_only_on_change() {
        let mut g = Generations::default();
        let mut a = report("0", 1);
        assert!(g.stamp(&mut a));
        let mut b = report("0", 2);
        assert!(!g.stamp(&mut b));
        assert_eq!((a.generation, b.generation), (1, 1));
        let mut c = report("11255", 3);
        assert!(g.stamp(&mut c));
        assert_eq!(c.generation, 2);
        assert_eq!(changes(&b, &c), vec!["user.max_user_namespaces: 0 → 11255"]);
        assert!(changes(&a, &b).is_empty());
    }
}
