//! The controller's Prometheus metrics: counters the reconciler and the
//! workload connections bump, and gauges computed at scrape time from the
//! Machine cache ([`Gauges`]). Rendered with the node crate's exposition
//! writer and duration histogram (`sandbox_readiness::metrics`), so the
//! workspace has one Prometheus writer.
//!
//! One instance per process, held in the reconciler's
//! [`Context`](crate::context::Context) and shared by `Arc` with the
//! endpoints and the leader elector: no global.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use sandbox_readiness::metrics::{
    text::{Encoder, Kind},
    DurationHistogram,
};

/// What the Machine cache says at a scrape.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Gauges {
    /// cluster ("ns/name") → Machines selected for mirroring.
    pub machines: BTreeMap<String, u64>,
    /// condition status (True/False/Unknown/none) → Machines.
    pub conditions: BTreeMap<String, u64>,
    /// Machines whose gate on our type has `polarity: Negative`.
    pub negative_gates: u64,
    /// Mirrored Machines skipped because they or their Cluster are paused.
    pub paused: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    writes: AtomicU64,
    write_errors: AtomicU64,
    conflicts: AtomicU64,
    events: AtomicU64,
    reconciles: AtomicU64,
    reconcile_errors: AtomicU64,
    /// 0 standby, 1 leader; election off counts as leader.
    leader: AtomicU64,
    /// 1 once the management caches listed.
    synced: AtomicU64,
    /// Why the pools cannot be read yet (the TalosConfig CRD's read), None
    /// once their watches run (and before the first try).
    desired_waiting: Mutex<Option<String>>,
    /// 1 once the TalosConfig and TalosConfigTemplate watches run.
    desired_watched: AtomicU64,
    /// Unix seconds of the controller loop's last sign of life (a reconcile
    /// or a resync tick it consumed).
    progress: AtomicU64,
    workload_errors: Mutex<BTreeMap<String, u64>>,
    reconcile_time: DurationHistogram,
    /// Pod proofs ended, by outcome (proven, failed, unknown).
    proofs: Tally,
    proof_time: DurationHistogram,
    /// Writes in workload clusters for the proof, by verb (create, delete).
    proof_writes: Tally,
}

/// A counter per fixed label value.
#[derive(Debug, Default)]
struct Tally(Mutex<BTreeMap<&'static str, u64>>);

impl Tally {
    fn bump(&self, key: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    fn get(&self, key: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or_default()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Metrics {
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
        self.alive();
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed) == 1
    }

    /// What the pools' watches wait for (`None`: they run).
    pub fn set_desired_waiting(&self, why: Option<&str>) {
        *self
            .desired_waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = why.map(str::to_string);
        self.desired_watched
            .store(u64::from(why.is_none()), Ordering::Relaxed);
    }

    /// Ready to serve: the management caches listed and the pools readable;
    /// else what it waits for.
    pub fn ready(&self) -> Result<(), String> {
        if !self.synced() {
            return Err("caches not yet synced".into());
        }
        match self
            .desired_waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
        {
            Some(why) => Err(format!("the pools cannot be read yet: {why}")),
            None => Ok(()),
        }
    }

    /// The loop is alive: it reconciled, or it consumed a resync tick.
    pub fn alive(&self) {
        self.progress.store(unix_now(), Ordering::Relaxed);
    }

    /// `/healthz`: the loop showed a sign of life within `within` (it
    /// consumes a resync tick at least once a `--resync`, so a loop that
    /// stopped, or a reconcile that hangs all of it, fails this).
    pub fn progressing(&self, within: Duration) -> bool {
        let last = self.progress.load(Ordering::Relaxed);
        last == 0 || unix_now().saturating_sub(last) <= within.as_secs()
    }

    pub fn reconciled(&self, took: Duration, ok: bool) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.reconcile_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.reconcile_time.observe(took);
        self.alive();
    }

    pub fn workload_error(&self, cluster: &str) {
        let mut m = self
            .workload_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *m.entry(cluster.to_string()).or_default() += 1;
    }

    /// Keeps the per-cluster error counters of the clusters `keep` names.
    pub fn retain_workload_errors(&self, keep: impl Fn(&str) -> bool) {
        self.workload_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|c, _| keep(c));
    }

    /// A pod proof ended with `outcome` after `took`.
    pub fn proof_done(&self, outcome: &'static str, took: Duration) {
        self.proofs.bump(outcome);
        self.proof_time.observe(took);
    }

    /// A write in a workload cluster for the proof (`create`, `delete`).
    pub fn proof_write(&self, verb: &'static str) {
        self.proof_writes.bump(verb);
    }

    /// The exposition text.
    pub fn render(&self, version: &str, g: &Gauges) -> String {
        const P: &str = "sandbox_readiness_controller_";
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut e = Encoder::new();
        let name = |s: &str| format!("{P}{s}");
        e.family(
            &name("build_info"),
            Kind::Gauge,
            "The controller's version (always 1).",
        );
        e.sample(&name("build_info"), &[("version", version)], 1.0);
        e.single(
            &name("leader"),
            Kind::Gauge,
            "1 while this replica is the leader (or leader election is off), 0 as a standby.",
            n(&self.leader),
        );
        e.single(
            &name("caches_synced"),
            Kind::Gauge,
            "1 once the management cluster's Machines, MachineDeployments and Clusters were listed.",
            n(&self.synced),
        );
        e.single(
            &name("desired_state_watched"),
            Kind::Gauge,
            "1 once the TalosConfig and TalosConfigTemplate watches run; 0 while the TalosConfig CRD cannot be read (the log and /readyz say why; it is read again with backoff up to 30 s).",
            n(&self.desired_watched),
        );
        e.family(
            &name("machines"),
            Kind::Gauge,
            "Machines mirrored, by workload cluster (namespace/name).",
        );
        for (c, v) in &g.machines {
            e.sample(&name("machines"), &[("cluster", c)], *v as f64);
        }
        e.family(
            &name("conditions"),
            Kind::Gauge,
            "Mirrored Machines by the status of their condition (none: not yet written).",
        );
        for (s, v) in &g.conditions {
            e.sample(&name("conditions"), &[("status", s)], *v as f64);
        }
        e.single(
            &name("negative_polarity_gates"),
            Kind::Gauge,
            "Machines whose readiness gate on the condition type has polarity Negative (a misconfiguration: their condition says Unknown).",
            g.negative_gates as f64,
        );
        e.single(
            &name("paused_machines"),
            Kind::Gauge,
            "Mirrored Machines left alone because they or their Cluster are paused.",
            g.paused as f64,
        );
        for (metric, help, v) in [
            (
                "writes_total",
                "Machine condition writes accepted by the API server.",
                &self.writes,
            ),
            (
                "write_errors_total",
                "Machine condition writes that failed (other than 409).",
                &self.write_errors,
            ),
            (
                "conflicts_total",
                "409 Conflict answers to guarded Machine writes (each re-read and retried).",
                &self.conflicts,
            ),
            ("events_total", "Events recorded on Machines.", &self.events),
            (
                "reconciles_total",
                "Machine reconciles run.",
                &self.reconciles,
            ),
            (
                "reconcile_errors_total",
                "Machine reconciles that ended in an error (retried with a backoff).",
                &self.reconcile_errors,
            ),
        ] {
            e.single(&name(metric), Kind::Counter, help, n(v));
        }
        e.family(
            &name("workload_api_errors_total"),
            Kind::Counter,
            "Failed reads of a workload cluster's API server, by cluster.",
        );
        for (c, v) in self
            .workload_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            e.sample(
                &name("workload_api_errors_total"),
                &[("cluster", c)],
                *v as f64,
            );
        }
        for (metric, help, label, keys, tally) in [
            (
                "proofs_total",
                "Pod proofs ended, by outcome: proven (every pod ran), failed (kubelet could not run one), unknown (the controller could not tell).",
                "outcome",
                &["proven", "failed", "unknown"][..],
                &self.proofs,
            ),
            (
                "proof_workload_writes_total",
                "Writes in workload clusters for the pod proof, by verb (create: the namespace and pods; delete: pods).",
                "verb",
                &["create", "delete"][..],
                &self.proof_writes,
            ),
        ] {
            e.family(&name(metric), Kind::Counter, help);
            for k in keys {
                e.sample(&name(metric), &[(label, k)], tally.get(k) as f64);
            }
        }
        let p = self.proof_time.snapshot();
        e.histogram(
            &name("proof_duration_seconds"),
            "Time from a proof's start to its result (its pods' creation, start and kubelet's answer).",
            &p.buckets,
            p.sum_seconds,
            p.count,
        );
        let h = self.reconcile_time.snapshot();
        e.histogram(
            &name("reconcile_duration_seconds"),
            "Time of one Machine's reconcile.",
            &h.buckets,
            h.sum_seconds,
            h.count,
        );
        e.finish()
    }
}

/// The status of the condition `ty` in a Machine's JSON, if written.
pub fn status_of(machine: &serde_json::Value, ty: &str) -> Option<String> {
    crate::machine::conditions(machine)
        .iter()
        .find(|c| c["type"] == ty)?
        .get("status")?
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_gauges_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.write_ok();
        m.write_ok();
        m.conflict();
        m.workload_error("tenant-a/c1");
        m.reconciled(Duration::from_millis(30), true);
        m.reconciled(Duration::from_millis(3), false);
        let mut g = Gauges::default();
        g.machines.insert("tenant-a/c1".into(), 2);
        g.machines.insert("t\"b/c2".into(), 1);
        for (s, v) in [("True", 1), ("False", 1), ("Unknown", 0), ("none", 1)] {
            g.conditions.insert(s.into(), v);
        }
        g.negative_gates = 1;
        let t = m.render("0.1.0", &g);
        for want in [
            "sandbox_readiness_controller_writes_total 2\n",
            "sandbox_readiness_controller_conflicts_total 1\n",
            "sandbox_readiness_controller_reconciles_total 2\n",
            "sandbox_readiness_controller_reconcile_errors_total 1\n",
            "sandbox_readiness_controller_machines{cluster=\"tenant-a/c1\"} 2\n",
            "sandbox_readiness_controller_machines{cluster=\"t\\\"b/c2\"} 1\n",
            "sandbox_readiness_controller_conditions{status=\"Unknown\"} 0\n",
            "sandbox_readiness_controller_conditions{status=\"none\"} 1\n",
            "sandbox_readiness_controller_negative_polarity_gates 1\n",
            "_bucket{le=\"0.025\"} 1\n",
            "_bucket{le=\"0.05\"} 2\n",
            "_bucket{le=\"+Inf\"} 2\n",
            "sandbox_readiness_controller_workload_api_errors_total{cluster=\"tenant-a/c1\"} 1\n",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
    }

    /// docs/reference/metrics.md has a row for every family, naming each
    /// of its labels (histogram series and their `le` aside).
    #[test]
    fn the_metrics_page_names_every_family_and_its_labels() {
        let m = Metrics::default();
        m.workload_error("ns/c");
        let mut g = Gauges::default();
        g.machines.insert("ns/c".into(), 1);
        g.conditions.insert("True".into(), 1);
        let text = m.render("0.1.0", &g);
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/reference/metrics.md"
        ))
        .unwrap_or_else(|e| panic!("metrics.md: {e}"));
        let mut wrong = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            if ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.ends_with(s))
            {
                continue;
            }
            let Some(row) = page
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
            else {
                wrong.push(format!("{name}: no row"));
                continue;
            };
            for label in labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
            {
                let key = label.split_once('=').map_or(label, |(k, _)| k);
                if !row.contains(&format!("`{key}`")) {
                    wrong.push(format!("{name}: label {key} not named"));
                }
            }
        }
        assert!(wrong.is_empty(), "docs/reference/metrics.md: {wrong:?}");
    }

    #[test]
    fn progress() {
        let m = Metrics::default();
        // Not started yet: nothing to judge.
        assert!(m.progressing(Duration::from_secs(1)));
        m.progress.store(unix_now() - 600, Ordering::Relaxed);
        assert!(!m.progressing(Duration::from_secs(180)));
        m.alive();
        assert!(m.progressing(Duration::from_secs(180)));
    }

    #[test]
    fn workload_error_labels_are_pruned_to_the_clusters_kept() {
        let m = Metrics::default();
        m.workload_error("t1/kept");
        m.workload_error("t1/gone");
        m.retain_workload_errors(|c| c == "t1/kept");
        let text = m.render("v", &Gauges::default());
        assert!(text.contains("cluster=\"t1/kept\""), "{text}");
        assert!(!text.contains("t1/gone"), "{text}");
    }

    #[test]
    fn readyz_names_what_it_waits_for() {
        let m = Metrics::default();
        assert_eq!(m.ready(), Err("caches not yet synced".into()));
        m.set_synced();
        m.set_desired_waiting(Some("CRD x cannot be read: 503"));
        assert_eq!(
            m.ready(),
            Err("the pools cannot be read yet: CRD x cannot be read: 503".into())
        );
        m.set_desired_waiting(None);
        assert_eq!(m.ready(), Ok(()));
    }
}
