//! The controller's Prometheus metrics: counters and gauges the loop's
//! hooks update, rendered in the text exposition format (0.0.4) by
//! [`Metrics::render`] (pure over the values it holds).
//!
//! One process-wide instance ([`global`]) so the hooks in the loop are one
//! line each and the loop's signatures stay as they are.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, OnceLock,
    },
    time::Duration,
};

/// Reconcile-round latency buckets, seconds (a round reads caches and
/// writes only what changed: milliseconds at rest, up to seconds under a
/// burst of writes at the QPS limit).
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct Gauges {
    /// cluster ("ns/name") → Machines selected for mirroring.
    machines: BTreeMap<String, u64>,
    /// condition status (True/False/Unknown/none) → Machines.
    conditions: BTreeMap<String, u64>,
    /// cluster → workload API errors (a counter, kept per cluster).
    workload_errors: BTreeMap<String, u64>,
    rounds: Histogram,
}

#[derive(Debug, Default)]
pub struct Metrics {
    writes: AtomicU64,
    write_errors: AtomicU64,
    conflicts: AtomicU64,
    events: AtomicU64,
    /// 0 standby, 1 leader; election off counts as leader.
    leader: AtomicU64,
    /// 1 once the management caches listed.
    synced: AtomicU64,
    g: Mutex<Gauges>,
}

pub fn global() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::default)
}

impl Metrics {
    fn gauges(&self) -> std::sync::MutexGuard<'_, Gauges> {
        self.g.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write_ok(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn write_failed(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.store(u64::from(leading), Ordering::Relaxed);
    }

    pub fn set_synced(&self) {
        self.synced.store(1, Ordering::Relaxed);
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed) == 1
    }

    pub fn workload_error(&self, cluster: &str) {
        *self
            .gauges()
            .workload_errors
            .entry(cluster.to_string())
            .or_default() += 1;
    }

    /// After a round: the Machines it mirrored, as (cluster, condition
    /// status or None), and how long it took.
    pub fn round(&self, watched: &[(String, Option<String>)], took: Duration) {
        let mut g = self.gauges();
        g.machines.clear();
        g.conditions.clear();
        for s in ["True", "False", "Unknown"] {
            g.conditions.insert(s.to_string(), 0);
        }
        for (cluster, status) in watched {
            *g.machines.entry(cluster.clone()).or_default() += 1;
            let s = status.clone().unwrap_or_else(|| "none".into());
            *g.conditions.entry(s).or_default() += 1;
        }
        let secs = took.as_secs_f64();
        let h = &mut g.rounds;
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// The exposition text.
    pub fn render(&self, version: &str) -> String {
        let g = self.gauges();
        let mut o = String::new();
        let fam = |o: &mut String, name: &str, ty: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {ty}");
        };
        fam(
            &mut o,
            "sandbox_readiness_controller_build_info",
            "gauge",
            "The controller's version (always 1).",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_build_info{{version=\"{}\"}} 1",
            escape(version)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_leader",
            "gauge",
            "1 while this replica is the leader (or leader election is off), 0 as a standby.",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_leader {}",
            self.leader.load(Ordering::Relaxed)
        );
        fam(&mut o, "sandbox_readiness_controller_caches_synced", "gauge", "1 once the management cluster's Machines, MachineDeployments and Clusters were listed.");
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_caches_synced {}",
            self.synced.load(Ordering::Relaxed)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_machines",
            "gauge",
            "Machines mirrored, by workload cluster (namespace/name).",
        );
        for (c, n) in &g.machines {
            let _ = writeln!(
                o,
                "sandbox_readiness_controller_machines{{cluster=\"{}\"}} {n}",
                escape(c)
            );
        }
        fam(
            &mut o,
            "sandbox_readiness_controller_conditions",
            "gauge",
            "Mirrored Machines by the status of their condition (none: not yet written).",
        );
        for (s, n) in &g.conditions {
            let _ = writeln!(
                o,
                "sandbox_readiness_controller_conditions{{status=\"{}\"}} {n}",
                escape(s)
            );
        }
        fam(
            &mut o,
            "sandbox_readiness_controller_writes_total",
            "counter",
            "Machine condition writes accepted by the API server.",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_writes_total {}",
            self.writes.load(Ordering::Relaxed)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_write_errors_total",
            "counter",
            "Machine condition writes that failed (other than 409).",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_write_errors_total {}",
            self.write_errors.load(Ordering::Relaxed)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_conflicts_total",
            "counter",
            "409 Conflict answers to guarded Machine writes (each re-read and retried).",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_conflicts_total {}",
            self.conflicts.load(Ordering::Relaxed)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_events_total",
            "counter",
            "Events recorded on Machines.",
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_events_total {}",
            self.events.load(Ordering::Relaxed)
        );
        fam(
            &mut o,
            "sandbox_readiness_controller_workload_api_errors_total",
            "counter",
            "Failed reads of a workload cluster's API server, by cluster.",
        );
        for (c, n) in &g.workload_errors {
            let _ = writeln!(
                o,
                "sandbox_readiness_controller_workload_api_errors_total{{cluster=\"{}\"}} {n}",
                escape(c)
            );
        }
        let h = &g.rounds;
        fam(
            &mut o,
            "sandbox_readiness_controller_reconcile_duration_seconds",
            "histogram",
            "Time of one reconcile round over all mirrored Machines.",
        );
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                o,
                "sandbox_readiness_controller_reconcile_duration_seconds_bucket{{le=\"{b}\"}} {}",
                h.counts[i]
            );
        }
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_reconcile_duration_seconds_sum {}",
            h.sum
        );
        let _ = writeln!(
            o,
            "sandbox_readiness_controller_reconcile_duration_seconds_count {}",
            h.count
        );
        o
    }
}

/// The status of the condition `ty` in a Machine's JSON, if written.
pub fn status_of(machine: &serde_json::Value, ty: &str) -> Option<String> {
    machine
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?
        .get("status")?
        .as_str()
        .map(str::to_string)
}

/// Label values: backslash, quote and newline escaped (exposition format).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.write_ok();
        m.write_ok();
        m.conflict();
        m.workload_error("tenant-a/c1");
        m.round(
            &[
                ("tenant-a/c1".into(), Some("True".into())),
                ("tenant-a/c1".into(), None),
                ("t\"b/c2".into(), Some("False".into())),
            ],
            Duration::from_millis(30),
        );
        let t = m.render("0.1.0");
        assert!(
            t.contains("sandbox_readiness_controller_writes_total 2\n"),
            "{t}"
        );
        assert!(
            t.contains("sandbox_readiness_controller_conflicts_total 1\n"),
            "{t}"
        );
        assert!(
            t.contains("sandbox_readiness_controller_machines{cluster=\"tenant-a/c1\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("sandbox_readiness_controller_machines{cluster=\"t\\\"b/c2\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("sandbox_readiness_controller_conditions{status=\"Unknown\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("sandbox_readiness_controller_conditions{status=\"none\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("_bucket{le=\"0.025\"} 0\n"), "{t}");
        assert!(t.contains("_bucket{le=\"0.05\"} 1\n"), "{t}");
        assert!(t.contains("_bucket{le=\"+Inf\"} 1\n"), "{t}");
        assert!(t.contains("sandbox_readiness_controller_workload_api_errors_total{cluster=\"tenant-a/c1\"} 1\n"), "{t}");
    }
}
