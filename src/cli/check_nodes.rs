//! `check --from-node-conditions`: the Nodes instead of the agents. The
//! NodeList (`--kube-nodes`, `--nodes-cmd`) is read, and every Node judged
//! by the library's reader ([`read::judge`], the one the readiness-gate
//! controller uses): its condition, the heartbeat's age, and with a pool's
//! desired state (`--desired-from`/`--desired-cmd`, or `--sysctl` and the
//! requirements) whether its `sandbox-readiness.io/desired` annotation
//! covers it. Under `--wait` everything is read again every `--poll`.
//! Nothing is dialled: no TLS, no ports, no agent certificates.

use std::{
    fmt::Write as _,
    io::Write,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use sandbox_readiness::{
    desired::findings::{self, Combined},
    evaluate,
    fleet::{result::count_matches, source},
    nodestatus::{
        condition::Status,
        read::{self, Judged, Pool, Reading},
        validate_qualified_name,
    },
    proto::v1::DesiredState,
    text::{clean_line, fmt_duration},
};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{args::Format, check::CheckArgs, exit::Outcome};

const WHO: &str = "sandbox-readiness check";

/// At most this many not-ready nodes are named in the summary line.
const SUMMARY_NODES: usize = 3;

/// The flags that only mean something when agents are dialled, refused in
/// one line (clap's conflict errors are several).
pub fn refuse_dial_flags(a: &CheckArgs) -> Result<(), String> {
    let given = [
        ("--nodes", !a.nodes.is_empty()),
        ("--nodes-file", !a.nodes_file.is_empty()),
        ("--port", a.port.is_some()),
        ("--parallel", a.parallel.is_some()),
        ("--timeout", a.timeout.is_some()),
        ("--connect-timeout", a.connect_timeout.is_some()),
        ("--refresh", a.refresh),
        ("--show-reports", a.show_reports),
        ("--tls-ca", a.tls_ca.is_some()),
        ("--tls-cert", a.tls_cert.is_some()),
        ("--tls-key", a.tls_key.is_some()),
        ("--tls-server-name", a.tls_server_name.is_some()),
        ("--tls-server-name-from-node", a.tls_server_name_from_node),
        ("--insecure-plaintext", a.insecure_plaintext),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        return Err(format!(
            "{flag} does not apply to --from-node-conditions (the Nodes are read, no agent is dialled)"
        ));
    }
    if a.kube_nodes.is_none() && a.nodes_cmd.is_none() {
        return Err("--from-node-conditions needs --kube-nodes FILE|- or --nodes-cmd 'kubectl get nodes -o json'".into());
    }
    if a.kube_nodes.is_some() && a.nodes_cmd.is_some() {
        return Err(
            "--from-node-conditions reads one NodeList: give --kube-nodes or --nodes-cmd, not both"
                .into(),
        );
    }
    if a.max_heartbeat_age.is_zero() {
        return Err("--max-heartbeat-age must be longer than zero".into());
    }
    validate_qualified_name(&a.condition_type)
        .map_err(|e| format!("--condition-type {:?}: {e}", a.condition_type))
}

/// One Node, judged.
struct Row {
    reading: Reading,
    judged: Judged,
    message: String,
}

impl Row {
    fn word(&self) -> &'static str {
        match self.judged.status() {
            Status::True => "yes",
            Status::False => "no",
            Status::Unknown => "unknown",
        }
    }
}

/// What a round reads: the Nodes, the expected count, the pool.
struct Sources {
    nodes: source::DocSource,
    expect: Option<source::DocSource>,
    desired: Option<source::DocSource>,
}

impl Sources {
    async fn nodes(&self, a: &CheckArgs) -> Result<Vec<Reading>, String> {
        let (text, origin) = match &self.nodes {
            source::DocSource::File(path) => {
                let path: PathBuf = path.clone();
                tokio::task::spawn_blocking(move || {
                    source::read_capped(&path, "--kube-nodes")
                        .map(|t| (t, format!("--kube-nodes {}", path.display())))
                })
                .await
                .unwrap_or_else(|e| Err(format!("--kube-nodes: {e}")))?
            }
            source::DocSource::Cmd(cmd) => (
                source::run_cmd("--nodes-cmd", cmd, a.nodes_cmd_timeout).await?,
                "--nodes-cmd output".to_string(),
            ),
        };
        read::read_list(&text, &origin, &a.condition_type)
    }
}

fn judge_all(readings: Vec<Reading>, pool: &Pool, stale_after: Duration) -> Vec<Row> {
    let now = SystemTime::now();
    let mut rows: Vec<Row> = readings
        .into_iter()
        .map(|reading| {
            let judged = read::judge(&reading, now, stale_after, pool);
            let message = clean_line(&judged.message(&reading, stale_after));
            Row {
                reading,
                judged,
                message,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        sandbox_readiness::fleet::nodes::natural_cmp(&a.reading.name, &b.reading.name)
    });
    rows
}

fn converged(rows: &[Row], expected: Option<usize>) -> bool {
    !rows.is_empty()
        && count_matches(rows.len(), expected, false)
        && rows.iter().all(|r| r.judged.ready())
}

fn heartbeat_age(r: &Reading) -> Option<Duration> {
    let hb = r.condition.as_ref()?.heartbeat?;
    Some(SystemTime::now().duration_since(hb).unwrap_or_default())
}

fn summary(rows: &[Row], expected: Option<usize>, condition_type: &str) -> String {
    let ready = rows.iter().filter(|r| r.judged.ready()).count();
    let mut s = format!(
        "{ready}/{} converged (via Node condition {condition_type})",
        rows.len()
    );
    let off: Vec<&Row> = rows.iter().filter(|r| !r.judged.ready()).collect();
    for r in off.iter().take(SUMMARY_NODES) {
        let _ = write!(s, "; {}: {}", clean_line(&r.reading.name), r.message);
    }
    if off.len() > SUMMARY_NODES {
        let _ = write!(s, "; and {} more", off.len() - SUMMARY_NODES);
    }
    match expected {
        Some(n) if !count_matches(rows.len(), expected, false) => {
            let _ = write!(s, "; expected {n} nodes, {} found", rows.len());
        }
        _ if rows.is_empty() => s.push_str("; no nodes"),
        _ => {}
    }
    s
}

fn table(rows: &[Row]) -> String {
    let header = ["NODE", "CONVERGED", "CONDITION", "HEARTBEAT", "FINDING"].map(String::from);
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            let c = r.reading.condition.as_ref();
            [
                clean_line(&r.reading.name),
                r.word().to_string(),
                c.map_or("-", |c| c.status.as_str()).to_string(),
                heartbeat_age(&r.reading).map_or("-".into(), |a| {
                    format!("{} ago", humantime::format_duration(round(a)))
                }),
                // A ready Node's reason ("Converged") says nothing more.
                if r.judged.ready() || r.message.is_empty() {
                    "-".into()
                } else {
                    r.message.clone()
                },
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&cells) {
        let mut l = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

fn round(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn json_document(a: &CheckArgs, rows: &[Row], run: &Judging, elapsed: Duration) -> Value {
    let nodes: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "name": r.reading.name,
                "converged": r.judged.ready(),
                "status": r.judged.status().as_str(),
                "reason": r.message,
                "condition": r.reading.condition.as_ref().map(|c| json!({
                    "status": c.status.as_str(),
                    "reason": c.reason,
                    "message": c.message,
                    "heartbeatAgeMs": heartbeat_age(&r.reading).map(millis),
                })),
            })
        })
        .collect();
    let mut doc = json!({
        "converged": converged(rows, run.expected),
        "summary": summary(rows, run.expected, &a.condition_type),
        "source": "nodeCondition",
        "conditionType": a.condition_type,
        "maxHeartbeatAgeMs": millis(a.max_heartbeat_age),
        "nodesTotal": rows.len(),
        "nodesConverged": rows.iter().filter(|r| r.judged.ready()).count(),
        "expectedNodes": run.expected,
        "elapsedMs": millis(elapsed),
        "desired": match &run.pool {
            Pool::Known(d) => serde_json::to_value(d).unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "nodes": nodes,
    });
    if let (Some(c), Some(obj)) = (&run.combined, doc.as_object_mut()) {
        obj.insert("poolDesired".into(), super::check::desired_json(c));
    }
    doc
}

/// What the Nodes are judged against, and how many are expected.
struct Judging {
    intent: DesiredState,
    combined: Option<Combined>,
    pool: Pool,
    expected: Option<usize>,
}

impl Judging {
    fn set_pool(&mut self, combined: Option<Combined>) -> Result<(), String> {
        let d = combined
            .as_ref()
            .map_or_else(|| self.intent.clone(), |c| c.desired.clone());
        evaluate::validate(&d).map_err(|e| e.to_string())?;
        self.pool = if evaluate::is_empty(&d) {
            Pool::Own
        } else {
            Pool::Known(d)
        };
        self.combined = combined;
        Ok(())
    }
}

fn print(a: &CheckArgs, rows: &[Row], run: &Judging, elapsed: Duration) -> Outcome {
    let text = match a.output {
        Format::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&json_document(a, rows, run, elapsed)).unwrap_or_default()
        ),
        Format::Table => {
            let mut t = table(rows);
            t.push_str(&summary(rows, run.expected, &a.condition_type));
            t.push('\n');
            if let Some(c) = &run.combined {
                t.push_str(&super::check::desired_text(c));
            }
            t
        }
    };
    // A closed stdout (| head) must not turn a verdict into a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Outcome::converged(converged(rows, run.expected))
}

fn note(started: Instant, line: &str) {
    eprintln!(
        "[{:>5.1}s] {}",
        started.elapsed().as_secs_f64(),
        clean_line(line)
    );
}

/// Runs `check --from-node-conditions`: `intent` is `--sysctl` and the
/// requirements, `combined` the pool's configuration already read once
/// (bad input there was exit 2 before this).
pub async fn run(a: &CheckArgs, intent: DesiredState, combined: Option<Combined>) -> Outcome {
    if let Err(e) = refuse_dial_flags(a) {
        return Outcome::failed(WHO, e);
    }
    let sources = Sources {
        nodes: source::DocSource::from_flags(a.kube_nodes.as_ref(), a.nodes_cmd.as_ref())
            .unwrap_or(source::DocSource::Cmd(String::new())),
        expect: source::ExpectSource::from_flags(a.expect_from.as_ref(), a.expect_cmd.as_ref()),
        desired: source::DocSource::from_flags(a.desired_from.as_ref(), a.desired_cmd.as_ref()),
    };
    let started = Instant::now();
    let mut run = Judging {
        intent,
        combined: None,
        pool: Pool::Own,
        expected: a.expect_nodes.and_then(|n| usize::try_from(n).ok()),
    };
    if let Err(e) = run.set_pool(combined) {
        return Outcome::failed(WHO, e);
    }
    // The first round: any bad input is one line and exit 2.
    let mut readings = match sources.nodes(a).await {
        Ok(r) => r,
        Err(e) => return Outcome::failed(WHO, e),
    };
    if let Some(src) = &sources.expect {
        match source::read_expected(src, a.nodes_cmd_timeout).await {
            Ok(n) => run.expected = Some(n),
            Err(e) => return Outcome::failed(WHO, e),
        }
    }
    let Some(limit) = a.wait else {
        let rows = judge_all(readings, &run.pool, a.max_heartbeat_age);
        return print(a, &rows, &run, started.elapsed());
    };

    let deadline = started + limit;
    let mut last: std::collections::HashMap<String, (&'static str, String)> = Default::default();
    let mut failing: Option<String> = None;
    let mut first = true;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let rows = loop {
        let rows = judge_all(readings.clone(), &run.pool, a.max_heartbeat_age);
        if first {
            let n = rows.len();
            note(
                started,
                &format!(
                    "watching {n} node{} through their {} condition",
                    if n == 1 { "" } else { "s" },
                    a.condition_type
                ),
            );
            first = false;
        }
        for r in &rows {
            let now = (r.word(), r.message.clone());
            if last.get(&r.reading.name) != Some(&now) {
                let m = if r.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.message)
                };
                note(
                    started,
                    &format!("{} converged {}{m}", r.reading.name, r.word()),
                );
                last.insert(r.reading.name.clone(), now);
            }
        }
        last.retain(|n, _| rows.iter().any(|r| &r.reading.name == n));
        if converged(&rows, run.expected) {
            break rows;
        }
        // Sleep a poll, then read everything again; the deadline and
        // Ctrl-C end the wait at any point, a slow kubectl included.
        let again = async {
            tokio::time::sleep(a.nodes_cmd_interval).await;
            // Stdin is read once; a file is read again, a command re-run.
            let nodes = if sources.nodes.is_stdin() {
                None
            } else {
                Some(sources.nodes(a).await)
            };
            let expect = match sources.expect.as_ref().filter(|s| !s.is_stdin()) {
                Some(src) => Some(source::read_expected(src, a.nodes_cmd_timeout).await),
                None => None,
            };
            let desired = match sources.desired.as_ref().filter(|s| !s.is_stdin()) {
                Some(src) => Some(
                    source::read_desired(src, a.desired_name.as_deref(), a.nodes_cmd_timeout).await,
                ),
                None => None,
            };
            (nodes, expect, desired)
        };
        let (nodes, expect, desired) = tokio::select! {
            r = again => r,
            () = tokio::time::sleep_until(deadline) => {
                eprintln!("{WHO}: not converged within {}", fmt_duration(limit));
                break rows;
            }
            _ = &mut interrupted => {
                eprintln!("{WHO}: interrupted; the state so far:");
                break rows;
            }
        };
        // A failing read keeps the last state (a kubectl hiccup during a
        // rollout must not empty the pool), said once per error.
        let mut errors = Vec::new();
        match nodes {
            Some(Ok(r)) => readings = r,
            Some(Err(e)) => errors.push(format!("{e} (keeping the last node set)")),
            None => {}
        }
        match expect {
            Some(Ok(n)) => run.expected = Some(n),
            Some(Err(e)) => errors.push(format!("{e} (keeping the last expected count)")),
            None => {}
        }
        match desired {
            Some(Ok(p)) => {
                let next = findings::combine(&run.intent, &p);
                if let Err(e) = run.set_pool(Some(next)) {
                    errors.push(format!("{e} (keeping the last desired state)"));
                }
            }
            Some(Err(e)) => errors.push(format!("{e} (keeping the last desired state)")),
            None => {}
        }
        let now = (!errors.is_empty()).then(|| errors.join("; "));
        if now.is_some() && now != failing {
            for e in &errors {
                note(started, e);
            }
        }
        failing = now;
    };
    print(a, &rows, &run, started.elapsed())
}
