//! Prometheus metrics, pure: (published report, serve defaults, the agent's
//! own counters) → the text `serve --metrics-listen` serves.
//!
//! Nothing here observes: a scrape renders the report the owner task
//! published last, so scraping never starts an observation. Every series
//! about the node is derived from that report at scrape time; only the
//! agent's own counts (observations, refreshes, watchers, connections, the
//! observation duration histogram) come from outside it, in [`AgentStats`].

pub mod text;

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use text::{Encoder, Kind};

use crate::{
    evaluate::{self, FindingCode},
    proto::v1::{DesiredState, GvisorReadiness, Probe, ProbeOutcome, Report, SysctlState},
    report::all_sysctls,
};

/// Every metric's name starts with this.
pub const PREFIX: &str = "sandbox_readiness_";

/// Upper bounds (seconds) of the observation duration histogram: a full
/// observation takes milliseconds without a CRI, up to the CRI and probe
/// deadlines (seconds) with one.
pub const OBSERVATION_BUCKETS: [f64; 10] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// How long observations took, in [`OBSERVATION_BUCKETS`]: lock-free, a
/// few atomics, recorded by the owner task after each observation.
#[derive(Debug, Default)]
pub struct DurationHistogram {
    /// Per bucket (not cumulative), the last one past every bound. The
    /// count is their sum, so a scrape never sees `_count` below a bucket.
    counts: [AtomicU64; OBSERVATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl DurationHistogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = OBSERVATION_BUCKETS
            .iter()
            .position(|&upper| secs <= upper)
            .unwrap_or(OBSERVATION_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Cumulative counts per bound, the sum (seconds) and the count.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = [(0.0, 0); OBSERVATION_BUCKETS.len()];
        let mut total = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            total = total.saturating_add(c.load(Ordering::Relaxed));
            if let Some(b) = buckets.get_mut(i) {
                *b = (OBSERVATION_BUCKETS[i], total);
            }
        }
        HistogramSnapshot {
            buckets,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            count: total,
        }
    }
}

/// A [`DurationHistogram`] read at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: [(f64, u64); OBSERVATION_BUCKETS.len()],
    pub sum_seconds: f64,
    pub count: u64,
}

/// The agent's own numbers, read at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStats {
    pub observations: u64,
    pub sandbox_probes: u64,
    /// CRI canaries run.
    pub canaries: u64,
    /// Requests that asked the owner for a fresh observation.
    pub refreshes: u64,
    /// Watch streams open now.
    pub watchers: u64,
    /// Connections held now on the gRPC port(s).
    pub connections: u64,
    pub observation_duration: HistogramSnapshot,
    /// The Node writer's numbers (`serve --kubeconfig`), when it runs.
    pub node_writer: Option<NodeWriterStats>,
}

/// What the Node writer counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeWriterStats {
    /// Successful writes (PATCH requests) to the Node.
    pub writes: u64,
    /// Failed requests per reason (`timeout`, `forbidden`, …).
    pub failures: Vec<(&'static str, u64)>,
    /// When the last write succeeded (Unix time).
    pub last_success: Option<f64>,
}

const PROBE_OUTCOMES: [(ProbeOutcome, &str); 5] = [
    (ProbeOutcome::Passed, "passed"),
    (ProbeOutcome::Failed, "failed"),
    (ProbeOutcome::Skipped, "skipped"),
    (ProbeOutcome::Error, "error"),
    (ProbeOutcome::Inconclusive, "inconclusive"),
];

const GVISOR_STATES: [(GvisorReadiness, &str); 4] = [
    (GvisorReadiness::Ready, "ready"),
    (GvisorReadiness::NotReady, "not_ready"),
    (GvisorReadiness::NotInstalled, "not_installed"),
    (GvisorReadiness::Unknown, "unknown"),
];

/// For each `(label value, last run)`: an outcome family (1 for the run's
/// outcome, 0 for the others; all 0 when it never ran) and a duration
/// family (runs only). Probes and canaries are reported alike.
fn outcome_families(
    e: &mut Encoder,
    [outcome_name, outcome_help]: [&str; 2],
    [duration_name, duration_help]: [&str; 2],
    label: &str,
    runs: &[(&str, Option<&Probe>)],
) {
    e.family(outcome_name, Kind::Gauge, outcome_help);
    for (value, p) in runs {
        let got = p.map(|p| p.outcome());
        for (outcome, word) in PROBE_OUTCOMES {
            e.sample(
                outcome_name,
                &[(label, value), ("outcome", word)],
                bool01(got == Some(outcome)),
            );
        }
    }
    e.family(duration_name, Kind::Gauge, duration_help);
    for (value, p) in runs {
        if let Some(d) = p.and_then(|p| p.duration.as_ref()) {
            e.sample(duration_name, &[(label, value)], seconds(d));
        }
    }
}

fn unix_seconds(t: &pbjson_types::Timestamp) -> f64 {
    t.seconds as f64 + f64::from(t.nanos) / 1e9
}

fn seconds(d: &pbjson_types::Duration) -> f64 {
    d.seconds as f64 + f64::from(d.nanos) / 1e9
}

fn bool01(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// A `user.max_*_namespaces` limit: the only sysctls served as values
/// (others are strings, or say nothing a dashboard needs).
fn is_namespace_limit(name: &str) -> bool {
    name.strip_prefix("user.max_")
        .is_some_and(|rest| rest.ends_with("_namespaces"))
}

/// The exposition for one scrape.
pub fn render(report: &Report, defaults: &DesiredState, agent: &AgentStats) -> String {
    let mut e = Encoder::new();
    let m = |name: &str| format!("{PREFIX}{name}");
    let verdict = evaluate::evaluate(report, defaults);

    e.single(
        &m("converged"),
        Kind::Gauge,
        "1 when the node meets the agent's default desired state (serve's flags), 0 otherwise.",
        bool01(verdict.converged),
    );

    let name = m("findings");
    e.family(
        &name,
        Kind::Gauge,
        "Findings against the agent's default desired state, by code (NOT_INITIAL_USER_NAMESPACE never blocks convergence).",
    );
    for code in FindingCode::ALL {
        let n = verdict
            .findings
            .iter()
            .filter(|f| f.code == code.as_str())
            .count();
        e.sample(&name, &[("code", code.as_str())], n as f64);
    }

    // Never a withheld or unreadable one: only values the report serves.
    let limits: Vec<(&str, f64)> = all_sysctls(report)
        .filter(|s| s.state() == SysctlState::Present && is_namespace_limit(&s.name))
        .filter_map(|s| Some((s.name.as_str(), s.value.trim().parse::<u64>().ok()? as f64)))
        .collect();
    if !limits.is_empty() {
        let name = m("sysctl_value");
        e.family(
            &name,
            Kind::Gauge,
            "Value of each user.max_*_namespaces sysctl the agent reads (absent, unreadable and withheld ones are left out).",
        );
        let mut seen: Vec<&str> = Vec::new();
        for (n, v) in limits {
            if !seen.contains(&n) {
                seen.push(n);
                e.sample(&name, &[("name", n)], v);
            }
        }
    }

    let userns = report.user_namespaces.as_ref();
    let gvisor = report.gvisor.as_ref();
    let probes: [(&str, Option<&Probe>); 4] = [
        (
            "userns_create",
            userns.and_then(|u| u.userns_create.as_ref()),
        ),
        ("idmap_mount", userns.and_then(|u| u.idmap_mount.as_ref())),
        (
            "runtime_state_idmap",
            userns.and_then(|u| u.runtime_state_idmap.as_ref()),
        ),
        ("sandbox", gvisor.and_then(|g| g.sandbox.as_ref())),
    ];
    outcome_families(
        &mut e,
        [
            &m("probe_outcome"),
            "1 for the outcome of each probe's last run, 0 for the other outcomes (all 0: not run).",
        ],
        [
            &m("probe_duration_seconds"),
            "How long each probe's last run took.",
        ],
        "probe",
        &probes,
    );

    let name = m("gvisor_readiness");
    e.family(
        &name,
        Kind::Gauge,
        "1 for gVisor's readiness state, 0 for the others (all 0: not observed).",
    );
    let state = gvisor.map(|g| g.readiness());
    for (readiness, word) in GVISOR_STATES {
        e.sample(&name, &[("state", word)], bool01(state == Some(readiness)));
    }

    e.single(
        &m("cri_reachable"),
        Kind::Gauge,
        "1 when the last observation reached the CRI endpoint.",
        bool01(
            gvisor
                .and_then(|g| g.cri.as_ref())
                .is_some_and(|c| c.reachable),
        ),
    );

    if !defaults.require_pod_userns.is_empty() {
        let name = m("pod_userns_supported");
        e.family(
            &name,
            Kind::Gauge,
            "1 when the CRI reports user namespace support for the runtime handler (serve --require-pod-userns).",
        );
        for h in &defaults.require_pod_userns {
            let ok = evaluate::pod_userns_finding(gvisor, h).is_none();
            e.sample(&name, &[("handler", h)], bool01(ok));
        }
    }

    // Only canaries that ran (required by serve's defaults or by a request
    // the operator allowed): one series set per handler.
    if !report.canaries.is_empty() {
        let canaries: Vec<(&str, Option<&Probe>)> = report
            .canaries
            .iter()
            .map(|c| (c.handler.as_str(), c.result.as_ref()))
            .collect();
        outcome_families(
            &mut e,
            [
                &m("canary_outcome"),
                "1 for the outcome of the last CRI canary per runtime handler, 0 for the other outcomes (skipped: not run, e.g. no sandbox image).",
            ],
            [
                &m("canary_duration_seconds"),
                "How long the last CRI canary per runtime handler took.",
            ],
            "handler",
            &canaries,
        );
        let name = m("canary_last_run_timestamp_seconds");
        e.family(
            &name,
            Kind::Gauge,
            "When the last CRI canary per runtime handler ran (Unix time).",
        );
        for (handler, p) in &canaries {
            if let Some(t) = p.and_then(|p| p.ran_at.as_ref()) {
                e.sample(&name, &[("handler", handler)], unix_seconds(t));
            }
        }
    }

    e.single(
        &m("observations_total"),
        Kind::Counter,
        "Full observations started since the agent started.",
        agent.observations as f64,
    );
    e.single(
        &m("sandbox_probes_total"),
        Kind::Counter,
        "Observations that ran the gVisor sandbox probe.",
        agent.sandbox_probes as f64,
    );
    e.single(
        &m("canaries_total"),
        Kind::Counter,
        "CRI canaries run since the agent started.",
        agent.canaries as f64,
    );
    e.single(
        &m("refreshes_total"),
        Kind::Counter,
        "Requests that asked for a fresh observation (refresh or sandbox probe).",
        agent.refreshes as f64,
    );
    e.single(
        &m("watchers"),
        Kind::Gauge,
        "Watch streams open now.",
        agent.watchers as f64,
    );
    e.single(
        &m("connections"),
        Kind::Gauge,
        "Connections held now on the gRPC port(s).",
        agent.connections as f64,
    );
    let h = &agent.observation_duration;
    e.histogram(
        &m("observation_duration_seconds"),
        "How long full observations took.",
        &h.buckets,
        h.sum_seconds,
        h.count,
    );

    if let Some(w) = &agent.node_writer {
        e.single(
            &m("node_writes_total"),
            Kind::Counter,
            "Writes (PATCH requests) of the Node's condition, labels and annotations that succeeded.",
            w.writes as f64,
        );
        let name = m("node_write_failures_total");
        e.family(
            &name,
            Kind::Counter,
            "Requests to the API server that failed, by reason.",
        );
        for (reason, n) in &w.failures {
            e.sample(&name, &[("reason", reason)], *n as f64);
        }
        if let Some(t) = w.last_success {
            e.single(
                &m("node_last_write_success_timestamp_seconds"),
                Kind::Gauge,
                "When a write to the Node last succeeded (Unix time).",
                t,
            );
        }
    }

    let name = m("build_info");
    e.family(
        &name,
        Kind::Gauge,
        "Always 1: the agent's version and the node's kernel release.",
    );
    let kernel = report
        .node
        .as_ref()
        .map_or("", |n| n.kernel_release.as_str());
    e.sample(
        &name,
        &[
            ("version", crate::observe::node::AGENT_VERSION),
            ("kernel", kernel),
        ],
        1.0,
    );
    e.single(
        &m("report_generation"),
        Kind::Gauge,
        "Generation of the published report: moves on whenever something observed changed.",
        report.generation as f64,
    );
    if let Some(t) = &report.observed_at {
        e.single(
            &m("last_observation_timestamp_seconds"),
            Kind::Gauge,
            "When the published report was observed (Unix time).",
            unix_seconds(t),
        );
    }
    e.finish()
}

#[cfg(test)]
mod tests;
