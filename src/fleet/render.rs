//! What `check` prints: the table (one row per node, sorted by name), the
//! one-line summary, the JSON document, and the progress of `--wait`.
//!
//! Every string that came from an agent goes through
//! [`crate::text::clean_line`] before it reaches a terminal: an
//! agent is a remote party, and escape sequences in its messages must not
//! repaint the operator's screen.

use std::{
    fmt::Write as _,
    io::{self, Write},
    time::Duration,
};

use serde_json::{json, Value};

use super::{
    pool::Change,
    result::{count_matches, node_reason, pool_converged, AskError, Counts, NodeResult},
};
use crate::{
    proto::v1::{DesiredState, Probe, ProbeOutcome, Report},
    report::{find_sysctl, outcome_word, readiness_word, sysctl_display},
    text::{clean_line, clean_text},
};

/// The sysctl whose value the table shows.
pub const USERNS_LIMIT: &str = "user.max_user_namespaces";

/// At most this many non-converged nodes are named in the summary line.
const SUMMARY_NODES: usize = 3;

fn converged_word(r: &NodeResult) -> &'static str {
    match &r.outcome {
        Ok(a) if a.verdict.converged => "yes",
        Ok(_) => "no",
        Err(AskError::NoAnswerYet) => "waiting",
        Err(AskError::Pending) => "pending",
        Err(AskError::Leaving) => "leaving",
        Err(_) => "unreachable",
    }
}

/// The table: one row per node, in the order given (see
/// [`sort_results`](super::result::sort_results)). Rows from a MachineList
/// are labelled by Machine, with the node name beside it once known.
pub fn table(results: &[NodeResult]) -> String {
    let machines = results.iter().any(|r| r.node.machine.is_some());
    let header = [
        if machines { "MACHINE" } else { "NODE" },
        "NODE",
        "ADDRESS",
        "CONVERGED",
        "USERNS LIMIT",
        "USERNS PROBE",
        "GVISOR",
        "POD-USERNS",
        "CANARY",
        "FINDING",
    ];
    let rows: Vec<[String; 10]> = results
        .iter()
        .map(|r| {
            let (limit, probe, gvisor, pod_userns, canary) = match &r.outcome {
                Ok(a) => (
                    find_sysctl(&a.report, USERNS_LIMIT)
                        .map_or_else(|| "-".to_string(), |s| clean_line(&sysctl_display(s))),
                    outcome_word(
                        a.report
                            .user_namespaces
                            .as_ref()
                            .and_then(|u| u.userns_create.as_ref()),
                    )
                    .to_string(),
                    readiness_word(a.report.gvisor.as_ref()).to_string(),
                    pod_userns_word(&a.report).to_string(),
                    canary_cell(&a.report),
                ),
                Err(_) => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
            };
            let mut reason = node_reason(&r.outcome);
            if r.boot_id_changes > 0 {
                let note = format!("(rebooted {}x while watched)", r.boot_id_changes);
                reason = if reason.is_empty() {
                    note
                } else {
                    format!("{reason} {note}")
                };
            }
            [
                clean_line(&r.node.name),
                clean_line(r.node.node_name().unwrap_or("-")),
                r.node.address_display(),
                converged_word(r).to_string(),
                limit,
                probe,
                gvisor,
                pod_userns,
                canary,
                if reason.is_empty() {
                    "-".into()
                } else {
                    reason
                },
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    // The node-name column only for Machines: a NodeList row is its node.
    let skip = if machines { usize::MAX } else { 1 };
    let mut line = |cells: &[String]| {
        let last = cells.len().saturating_sub(1);
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == skip {
                continue;
            }
            if i == last {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header.map(String::from));
    for row in &rows {
        line(row);
    }
    out
}

/// Whether `hostUsers: false` pods could start with the runtime's default
/// handler: "ok" when user namespaces and idmapped mounts (tmpfs and the
/// runtime's root) really work and the CRI reports user_namespaces for the
/// default handler, as kubelet reads it; "no" otherwise; "-" without a CRI
/// answer. (`--require-pod-userns` judges named handlers in the verdict.)
fn pod_userns_word(report: &Report) -> &'static str {
    let Some(cri) = report
        .gvisor
        .as_ref()
        .and_then(|g| g.cri.as_ref())
        .filter(|c| c.reachable)
    else {
        return "-";
    };
    let passed = |p: Option<&Probe>| p.is_some_and(|p| p.outcome() == ProbeOutcome::Passed);
    let probes = report.user_namespaces.as_ref().is_some_and(|u| {
        passed(u.userns_create.as_ref())
            && passed(u.idmap_mount.as_ref())
            && passed(u.runtime_state_idmap.as_ref())
    });
    let default_handler = cri
        .handlers
        .iter()
        .any(|h| h.name.is_empty() && h.user_namespaces == Some(true));
    if probes && default_handler {
        "ok"
    } else {
        "no"
    }
}

/// The canaries in a few characters: "ok 120ms" when every one passed
/// (the slowest), else the first that did not, e.g. "runsc failed"; "-"
/// when none ran.
fn canary_cell(report: &Report) -> String {
    let word = |p: Option<&Probe>| match p.map(Probe::outcome) {
        Some(ProbeOutcome::Passed) => "ok",
        Some(ProbeOutcome::Failed | ProbeOutcome::Error) => "failed",
        Some(ProbeOutcome::Inconclusive) => "inconclusive",
        _ => "not run",
    };
    if report.canaries.is_empty() {
        return "-".into();
    }
    if let Some(c) = report
        .canaries
        .iter()
        .find(|c| word(c.result.as_ref()) != "ok")
    {
        return clean_line(&format!("{} {}", c.handler, word(c.result.as_ref())));
    }
    let slowest = report
        .canaries
        .iter()
        .filter_map(|c| c.result.as_ref()?.duration.as_ref())
        .map(|d| d.seconds.saturating_mul(1000) + i64::from(d.nanos / 1_000_000))
        .max()
        .unwrap_or(0);
    format!("ok {slowest}ms")
}

/// One line: "9/10 converged; node-3: user.max_user_namespaces is 0, expected 11255".
/// Machines being deleted are left out of the count and named at the end.
pub fn summary(results: &[NodeResult], expected: Option<usize>) -> String {
    let (leaving, members): (Vec<&NodeResult>, Vec<&NodeResult>) =
        results.iter().partition(|r| r.node.is_leaving());
    let total = members.len();
    let converged = members.iter().filter(|r| r.converged()).count();
    let mut s = format!("{converged}/{total} converged");
    let off: Vec<&NodeResult> = members.into_iter().filter(|r| !r.converged()).collect();
    for r in off.iter().take(SUMMARY_NODES) {
        let _ = write!(
            s,
            "; {}: {}",
            clean_line(&r.node.name),
            node_reason(&r.outcome)
        );
    }
    if off.len() > SUMMARY_NODES {
        let _ = write!(s, "; and {} more", off.len() - SUMMARY_NODES);
    }
    let machines = results.iter().any(|r| r.node.machine.is_some());
    match expected {
        Some(n) if !count_matches(total, expected, machines) => {
            let _ = write!(s, "; expected {n} nodes, {total} found");
        }
        _ if total == 0 => s.push_str("; no nodes"),
        _ => {}
    }
    if !leaving.is_empty() {
        let names: Vec<String> = leaving.iter().map(|r| clean_line(&r.node.name)).collect();
        let _ = write!(s, "; leaving: {}", names.join(", "));
    }
    s
}

/// The full reports, one block per node, with their verdicts.
pub fn reports_text(results: &[NodeResult]) -> String {
    let mut out = String::new();
    for r in results {
        let _ = writeln!(
            out,
            "\n== {} ({}) ==",
            clean_line(&r.node.name),
            r.node.address_display()
        );
        match &r.outcome {
            Ok(a) => {
                out.push_str(&clean_text(&crate::output::report_table(&a.report)));
                out.push('\n');
                out.push_str(&clean_text(&crate::output::verdict_table(&a.verdict)));
                out.push('\n');
            }
            Err(e) => {
                let _ = writeln!(out, "{}", clean_line(&e.to_string()));
            }
        }
    }
    out
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    // The generated types always serialize; Null only if that ever changed.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The `-o json` document: the pool verdict, the summary line, and per
/// node its verdict and report (proto3 JSON mapping) or its error.
pub fn json_document(
    results: &[NodeResult],
    desired: &DesiredState,
    expected: Option<usize>,
    elapsed: Duration,
) -> Value {
    let members = || results.iter().filter(|r| !r.node.is_leaving());
    let converged = members().filter(|r| r.converged()).count();
    let unreachable = members().filter(|r| r.outcome.is_err()).count();
    let nodes: Vec<Value> = results
        .iter()
        .map(|r| {
            let (verdict, report, error) = match &r.outcome {
                Ok(a) => (to_json(&a.verdict), to_json(&a.report), Value::Null),
                Err(e) => (
                    Value::Null,
                    Value::Null,
                    json!({"kind": e.kind(), "message": e.to_string()}),
                ),
            };
            json!({
                "name": r.node.name,
                "address": r.node.address.as_ref().map(ToString::to_string),
                "machine": r.node.machine.as_ref().map(|m| json!({
                    "nodeName": m.node_name,
                    "deleting": m.deleting,
                })),
                "converged": r.converged(),
                "reason": node_reason(&r.outcome),
                "verdict": verdict,
                "report": report,
                "error": error,
                "elapsedMs": u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
                "bootIdChanges": r.boot_id_changes,
            })
        })
        .collect();
    json!({
        "converged": pool_converged(results, expected),
        "summary": summary(results, expected),
        "nodesTotal": members().count(),
        "nodesConverged": converged,
        "nodesUnreachable": unreachable,
        "expectedNodes": expected,
        "elapsedMs": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        "desired": to_json(desired),
        "nodes": nodes,
    })
}

/// Progress of `--wait` on stderr: on a terminal one redrawn line with
/// changes printed above it; otherwise one plain line per change.
#[derive(Debug)]
pub struct Progress {
    tty: bool,
    drawn: bool,
}

impl Progress {
    pub fn new(tty: bool) -> Self {
        Progress { tty, drawn: false }
    }

    fn line(counts: Counts, expected: Option<usize>, elapsed: Duration) -> String {
        let mut s = format!("converged {}/{}", counts.converged, counts.total);
        if let Some(n) = expected.filter(|&n| n > counts.total) {
            let _ = write!(s, " (expecting {n})");
        }
        let _ = write!(
            s,
            ", unreachable {}, waiting {}, elapsed {}s",
            counts.unreachable,
            counts.waiting,
            elapsed.as_secs()
        );
        s
    }

    fn clear(&mut self, err: &mut impl Write) {
        if self.tty && self.drawn {
            let _ = write!(err, "\r\x1b[2K");
            self.drawn = false;
        }
    }

    /// Prints what changed (agent text cleaned).
    pub fn changes(&mut self, changes: &[Change], elapsed: Duration) {
        if changes.is_empty() {
            return;
        }
        let mut err = io::stderr().lock();
        self.clear(&mut err);
        for c in changes {
            let _ = writeln!(
                err,
                "[{:>5.1}s] {}",
                elapsed.as_secs_f64(),
                clean_line(&c.to_string())
            );
        }
    }

    /// Prints one line of our own (not from an agent).
    pub fn note(&mut self, line: &str, elapsed: Duration) {
        let mut err = io::stderr().lock();
        self.clear(&mut err);
        let _ = writeln!(
            err,
            "[{:>5.1}s] {}",
            elapsed.as_secs_f64(),
            clean_line(line)
        );
    }

    /// Redraws the progress line (terminal only; plain output prints
    /// changes, not ticks, so logs do not fill with counters).
    pub fn tick(&mut self, counts: Counts, expected: Option<usize>, elapsed: Duration) {
        if !self.tty {
            return;
        }
        let mut err = io::stderr().lock();
        self.clear(&mut err);
        let _ = write!(err, "{}", Self::line(counts, expected, elapsed));
        let _ = err.flush();
        self.drawn = true;
    }

    /// Leaves the terminal on a fresh line.
    pub fn finish(&mut self) {
        let mut err = io::stderr().lock();
        self.clear(&mut err);
        let _ = err.flush();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{
        fleet::{
            nodes::parse_entry,
            result::{sort_results, Answer},
        },
        proto::v1::{
            Finding, GvisorReadiness, Probe, ProbeOutcome, Report, Sysctl, SysctlState,
            UserNamespaces, Verdict,
        },
    };

    fn result(name: &str, limit: &str, outcome: Result<(), AskError>) -> NodeResult {
        let mut node = parse_entry("127.0.0.1:50101", 1).unwrap();
        node.name = name.into();
        let outcome = outcome.map(|()| {
            let ok = limit == "11255";
            Answer {
                verdict: Verdict {
                    converged: ok,
                    findings: if ok {
                        vec![]
                    } else {
                        vec![Finding {
                            code: "SYSCTL_MISMATCH".into(),
                            message: format!("{USERNS_LIMIT} is {limit}, expected 11255"),
                            blocking: true,
                            ..Finding::default()
                        }]
                    },
                },
                report: Report {
                    user_namespaces: Some(UserNamespaces {
                        sysctls: vec![Sysctl {
                            name: USERNS_LIMIT.into(),
                            state: SysctlState::Present as i32,
                            value: limit.into(),
                            error: String::new(),
                        }],
                        userns_create: Some(Probe {
                            outcome: if ok {
                                ProbeOutcome::Passed
                            } else {
                                ProbeOutcome::Failed
                            } as i32,
                            ..Probe::default()
                        }),
                        ..UserNamespaces::default()
                    }),
                    gvisor: Some(crate::proto::v1::Gvisor {
                        readiness: GvisorReadiness::NotInstalled as i32,
                        ..Default::default()
                    }),
                    ..Report::default()
                },
            }
        });
        NodeResult {
            node,
            outcome,
            elapsed: Duration::from_millis(3),
            boot_id_changes: 0,
        }
    }

    #[test]
    fn table_rows_are_sorted_and_say_why() {
        let mut rs = vec![
            result("node-10", "11255", Ok(())),
            result("node-3", "0", Ok(())),
            result("node-2", "", Err(AskError::Refused)),
        ];
        sort_results(&mut rs);
        let t = table(&rs);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("NODE "), "{t}");
        // Every cell starts where its header does.
        let cols: Vec<usize> = [
            "ADDRESS",
            "CONVERGED",
            "USERNS LIMIT",
            "USERNS PROBE",
            "GVISOR",
            "POD-USERNS",
            "CANARY",
            "FINDING",
        ]
        .iter()
        .map(|h| lines[0].find(h).unwrap())
        .collect();
        let cell = |line: &str, i: usize| -> String {
            let end = cols
                .get(i + 1)
                .copied()
                .unwrap_or(line.len())
                .min(line.len());
            line[cols[i]..end].trim().to_string()
        };
        let row = |l: &str| (0..cols.len()).map(|i| cell(l, i)).collect::<Vec<_>>();
        assert!(lines[1].starts_with("node-2 "), "{t}");
        assert_eq!(
            row(lines[1]),
            [
                "127.0.0.1:50101",
                "unreachable",
                "-",
                "-",
                "-",
                "-",
                "-",
                "connection refused"
            ]
        );
        assert!(lines[2].starts_with("node-3 "), "{t}");
        assert_eq!(
            row(lines[2]),
            [
                "127.0.0.1:50101",
                "no",
                "0",
                "failed",
                "NOT_INSTALLED",
                "-",
                "-",
                "user.max_user_namespaces is 0, expected 11255"
            ]
        );
        assert!(lines[3].starts_with("node-10 "), "{t}");
        assert_eq!(
            row(lines[3]),
            [
                "127.0.0.1:50101",
                "yes",
                "11255",
                "passed",
                "NOT_INSTALLED",
                "-",
                "-",
                "-"
            ]
        );
        assert_eq!(
            summary(&rs, None),
            "1/3 converged; node-2: connection refused; node-3: user.max_user_namespaces is 0, expected 11255"
        );
        assert!(!pool_converged(&rs, None));
    }

    #[test]
    fn pod_userns_and_canary_cells() {
        use crate::proto::v1::{Canary, CriRuntime, Gvisor, RuntimeHandler, UserNamespaces};
        let probe = |o: ProbeOutcome, ms: i32| {
            Some(Probe {
                outcome: o as i32,
                duration: Some(pbjson_types::Duration {
                    seconds: 0,
                    nanos: ms * 1_000_000,
                }),
                ..Probe::default()
            })
        };
        let canary = |h: &str, o, ms| Canary {
            handler: h.into(),
            result: probe(o, ms),
            ..Canary::default()
        };
        let mut r = Report::default();
        assert_eq!((pod_userns_word(&r), canary_cell(&r).as_str()), ("-", "-"));
        r.canaries = vec![
            canary("runc", ProbeOutcome::Passed, 120),
            canary("runsc", ProbeOutcome::Passed, 300),
        ];
        assert_eq!(canary_cell(&r), "ok 300ms");
        r.canaries[1].result = probe(ProbeOutcome::Failed, 5);
        assert_eq!(canary_cell(&r), "runsc failed");
        r.canaries[1].result = probe(ProbeOutcome::Skipped, 0);
        assert_eq!(canary_cell(&r), "runsc not run");

        let passed = || probe(ProbeOutcome::Passed, 1);
        r.user_namespaces = Some(UserNamespaces {
            userns_create: passed(),
            idmap_mount: passed(),
            runtime_state_idmap: passed(),
            ..UserNamespaces::default()
        });
        let handler = |userns| RuntimeHandler {
            name: String::new(),
            user_namespaces: userns,
            ..RuntimeHandler::default()
        };
        r.gvisor = Some(Gvisor {
            cri: Some(CriRuntime {
                reachable: true,
                handlers: vec![handler(Some(true))],
                ..CriRuntime::default()
            }),
            ..Gvisor::default()
        });
        assert_eq!(pod_userns_word(&r), "ok");
        if let Some(c) = r.gvisor.as_mut().and_then(|g| g.cri.as_mut()) {
            c.handlers = vec![handler(None)];
        }
        assert_eq!(pod_userns_word(&r), "no");
    }

    #[test]
    fn summary_counts_and_expected_nodes() {
        let all: Vec<_> = (0..5)
            .map(|i| result(&format!("n{i}"), "11255", Ok(())))
            .collect();
        assert_eq!(summary(&all, None), "5/5 converged");
        assert!(pool_converged(&all, Some(5)));
        assert!(!pool_converged(&all, Some(6)));
        assert_eq!(
            summary(&all, Some(6)),
            "5/5 converged; expected 6 nodes, 5 found"
        );
        assert_eq!(summary(&[], None), "0/0 converged; no nodes");
        assert!(!pool_converged(&[], None));
        let bad: Vec<_> = (0..5)
            .map(|i| result(&format!("n{i}"), "0", Ok(())))
            .collect();
        assert!(summary(&bad, None).ends_with("; and 2 more"));
    }

    #[test]
    fn agent_text_cannot_paint_the_terminal() {
        let mut r = result("n", "0", Ok(()));
        if let Ok(a) = r.outcome.as_mut() {
            a.verdict.findings[0].message = "evil\x1b[2J\nline".into();
        }
        let t = table(std::slice::from_ref(&r));
        assert!(!t.contains('\x1b') && t.contains("evil?[2J line"), "{t}");
        assert!(!summary(std::slice::from_ref(&r), None).contains('\x1b'));
    }

    #[test]
    fn machine_rows_leaving_pending_and_exact_counts() {
        use crate::fleet::nodes::Machine;
        let machine = |name: &str, node: Option<&str>, deleting: bool, limit: &str| {
            let mut r = result(name, limit, Ok(()));
            r.node.machine = Some(Machine {
                node_name: node.map(String::from),
                deleting,
            });
            r
        };
        let mut pending = machine("m-3", None, false, "");
        pending.node.address = None;
        pending.outcome = Err(AskError::Pending);
        let mut leaving = machine("m-0", Some("w-0"), true, "0");
        leaving.outcome = Err(AskError::Leaving);
        let up = [
            machine("m-1", Some("w-1"), false, "11255"),
            machine("m-2", Some("w-2"), false, "11255"),
        ];
        let t = table(&[leaving.clone(), up[0].clone(), pending.clone()]);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0][..3], ["MACHINE", "NODE", "ADDRESS"], "{t}");
        assert_eq!(
            lines[1][..4],
            ["m-0", "w-0", "127.0.0.1:50101", "leaving"],
            "{t}"
        );
        assert_eq!(
            lines[2][..4],
            ["m-1", "w-1", "127.0.0.1:50101", "yes"],
            "{t}"
        );
        assert_eq!(lines[3][..4], ["m-3", "-", "-", "pending"], "{t}");
        // A Machine being deleted is not counted; a pending one is, unconverged.
        let with_leaving = [leaving.clone(), up[0].clone(), up[1].clone()];
        assert!(pool_converged(&with_leaving, Some(2)));
        assert_eq!(
            summary(&with_leaving, Some(2)),
            "2/2 converged; leaving: m-0"
        );
        let with_pending = [up[0].clone(), up[1].clone(), pending];
        assert!(!pool_converged(&with_pending, None));
        // Machines: exactly the expected count (a surplus means a rollout is
        // still under way); nodes: at least.
        assert!(!pool_converged(&up, Some(1)));
        assert_eq!(
            summary(&up, Some(1)),
            "2/2 converged; expected 1 nodes, 2 found"
        );
        let plain = [result("a", "11255", Ok(())), result("b", "11255", Ok(()))];
        assert!(pool_converged(&plain, Some(1)));
        assert!(!table(&plain).contains("MACHINE"));
        assert!(!pool_converged(&[leaving], None), "no members");
    }

    #[test]
    fn json_document_shape() {
        let rs = vec![
            result("a", "11255", Ok(())),
            result("b", "", Err(AskError::NoAnswer(Duration::from_secs(5)))),
        ];
        let v = json_document(
            &rs,
            &DesiredState::default(),
            Some(2),
            Duration::from_millis(7),
        );
        assert_eq!(v["converged"], false);
        assert_eq!(v["nodesTotal"], 2);
        assert_eq!(v["nodesConverged"], 1);
        assert_eq!(v["nodesUnreachable"], 1);
        assert_eq!(v["nodes"][0]["verdict"]["converged"], true);
        assert_eq!(
            v["nodes"][0]["report"]["userNamespaces"]["sysctls"][0]["value"],
            "11255"
        );
        assert_eq!(v["nodes"][1]["error"]["kind"], "deadline");
        assert!(v["nodes"][1]["report"].is_null());
    }
}
