//! The observation cache and its single owner task.
//!
//! One task owns observing: it polls the sysctls cheaply, runs a full
//! observation on a timer, on a noticed change and on demand, and publishes
//! each result through a `watch` channel. Requests never observe themselves:
//! they read the latest report, or ask the owner for a fresh one and share
//! one observation that started at most `min_refresh` before they asked
//! (refresh coalescing).
//! So however many refreshes arrive, at most one observation runs at a time,
//! and none starts sooner than `min_refresh` after the previous one: a burst
//! of any size costs at most two observations.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::{
    observe::{self, pb_timestamp, ObserveConfig, Scope},
    proto::v1::{ProbeOutcome, Report},
    report::{self, Generations},
};

/// Timing of the owner loop.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Cheap re-read of the sysctls.
    pub poll: Duration,
    /// Full observation (with the live probes).
    pub probe: Duration,
    /// No full observation starts sooner than this after the previous one.
    pub min_refresh: Duration,
}

/// A request for a fresh report.
#[derive(Debug)]
struct Refresh {
    sandbox: bool,
    reply: oneshot::Sender<Arc<Report>>,
}

/// The shared handle requests use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    latest: watch::Receiver<Arc<Report>>,
    refresh: mpsc::Sender<Refresh>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    observations: AtomicU64,
    sandbox_probes: AtomicU64,
}

/// Why a fresh report could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the observer has stopped")]
    Stopped,
    #[error("too many refresh requests waiting")]
    Busy,
}

impl State {
    /// The latest report (never blocks).
    pub fn latest(&self) -> Arc<Report> {
        self.with_counters(self.latest.borrow().clone())
    }

    /// A receiver that wakes on every changed report.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Report>> {
        self.latest.clone()
    }

    /// A report from an observation that started at most `min_refresh`
    /// before this call (including a sandbox probe when asked), shared with
    /// concurrent callers.
    pub async fn fresh(&self, sandbox: bool) -> Result<Arc<Report>, StateError> {
        let (reply, rx) = oneshot::channel();
        self.refresh
            .try_send(Refresh { sandbox, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => StateError::Busy,
                mpsc::error::TrySendError::Closed(_) => StateError::Stopped,
            })?;
        let report = rx.await.map_err(|_| StateError::Stopped)?;
        Ok(self.with_counters(report))
    }

    /// Fills the agent counters (not part of the fingerprint).
    pub fn with_counters(&self, report: Arc<Report>) -> Arc<Report> {
        let obs = self.counters.observations.load(Ordering::Relaxed);
        let sb = self.counters.sandbox_probes.load(Ordering::Relaxed);
        match &report.agent {
            Some(a) if a.observations == obs && a.sandbox_probes == sb => report,
            _ => {
                let mut r = (*report).clone();
                let agent = r.agent.get_or_insert_with(Default::default);
                agent.observations = obs;
                agent.sandbox_probes = sb;
                Arc::new(r)
            }
        }
    }

    /// Full observations run since start.
    pub fn observations(&self) -> u64 {
        self.counters.observations.load(Ordering::Relaxed)
    }
}

/// Runs the first observation, then starts the owner task. Returns the handle
/// and the task (which ends when every `State` is dropped or on `shutdown`).
pub async fn start(
    cfg: ObserveConfig,
    timing: Timing,
    shutdown: watch::Receiver<bool>,
) -> (State, tokio::task::JoinHandle<()>) {
    let started_at = pb_timestamp(SystemTime::now());
    let counters = Arc::new(Counters::default());
    let mut gens = Generations::default();
    let first_started = Instant::now();
    let mut first = observe::observe(&cfg, Scope::default()).await;
    counters.observations.fetch_add(1, Ordering::Relaxed);
    finish(&mut first, &started_at, &mut gens);
    stamp_counters(&mut first, &counters);
    log_first(&first);
    let (tx, rx) = watch::channel(Arc::new(first));
    // Bounded: a flood of refreshes beyond this is refused, not queued forever.
    let (refresh_tx, refresh_rx) = mpsc::channel(4096);
    let owner = Owner {
        cfg: Arc::new(cfg),
        timing,
        tx,
        gens,
        started_at,
        counters: counters.clone(),
        last_full: Instant::now(),
        last_started: first_started,
        last_sandbox: None,
    };
    let task = tokio::spawn(owner.run(refresh_rx, shutdown));
    (
        State {
            latest: rx,
            refresh: refresh_tx,
            counters,
        },
        task,
    )
}

fn finish(
    report: &mut Report,
    started_at: &pbjson_types::Timestamp,
    gens: &mut Generations,
) -> bool {
    if let Some(agent) = report.agent.as_mut() {
        agent.started_at = Some(*started_at);
    }
    gens.stamp(report)
}

/// Stores the counters in the published report, so that `State::latest`
/// hands it out as is instead of deep-cloning it on every request (the
/// counters only move when an observation starts). After `finish`: the
/// fingerprint excludes the agent info anyway.
fn stamp_counters(report: &mut Report, counters: &Counters) {
    let agent = report.agent.get_or_insert_with(Default::default);
    agent.observations = counters.observations.load(Ordering::Relaxed);
    agent.sandbox_probes = counters.sandbox_probes.load(Ordering::Relaxed);
}

fn log_first(r: &Report) {
    let u = r.user_namespaces.as_ref();
    let limit = r
        .user_namespaces
        .as_ref()
        .and_then(|u| {
            u.sysctls
                .iter()
                .find(|s| s.name == "user.max_user_namespaces")
        })
        .map(report::sysctl_display)
        .unwrap_or_default();
    info!(
        generation = r.generation,
        max_user_namespaces = %limit,
        userns_probe = report::outcome_word(u.and_then(|u| u.userns_create.as_ref())),
        idmap_probe = report::outcome_word(u.and_then(|u| u.idmap_mount.as_ref())),
        gvisor = report::readiness_word(r.gvisor.as_ref()),
        "first observation"
    );
    warn_failed_probes(r);
}

fn warn_failed_probes(r: &Report) {
    let failed = |p: Option<&crate::proto::v1::Probe>| {
        p.filter(|p| {
            matches!(
                ProbeOutcome::try_from(p.outcome),
                Ok(ProbeOutcome::Failed | ProbeOutcome::Error)
            )
        })
        .map(|p| p.message.clone())
    };
    if let Some(u) = r.user_namespaces.as_ref() {
        if let Some(m) = failed(u.userns_create.as_ref()) {
            warn!(probe = "userns", "{m}");
        }
        if let Some(m) = failed(u.idmap_mount.as_ref()) {
            warn!(probe = "idmap", "{m}");
        }
    }
    if let Some(m) = failed(r.gvisor.as_ref().and_then(|g| g.sandbox.as_ref())) {
        warn!(probe = "sandbox", "{m}");
    }
}

struct Owner {
    cfg: Arc<ObserveConfig>,
    timing: Timing,
    tx: watch::Sender<Arc<Report>>,
    gens: Generations,
    started_at: pbjson_types::Timestamp,
    counters: Arc<Counters>,
    last_full: Instant,
    /// When the published observation started.
    last_started: Instant,
    /// When the last sandbox probe started (its result is carried forward).
    last_sandbox: Option<Instant>,
}

type Running = tokio::task::JoinHandle<(Report, bool)>;

impl Owner {
    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Refresh>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut poll = tokio::time::interval(self.timing.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.reset();
        let mut running: Option<Running> = None;
        // When the running observation started, and whether it probes a sandbox.
        let mut running_since: Option<(Instant, bool)> = None;
        // Waiters of the observation that is running, and of the next one.
        let mut joined: Vec<Refresh> = Vec::new();
        let mut queued: Vec<Refresh> = Vec::new();
        let mut want_full = false;
        loop {
            let idle = running.is_none();
            let due = self.last_full + self.timing.probe;
            let earliest = self.last_full + self.timing.min_refresh;
            tokio::select! {
                _ = shutdown.changed() => return,
                req = requests.recv() => {
                    let Some(req) = req else { return };
                    // A refresh is answered by an observation that started at
                    // most `min_refresh` before it arrived: the published one,
                    // the running one, or the next.
                    if let Some(report) = self.fresh_enough(req.sandbox) {
                        let _ = req.reply.send(report);
                    } else if running_since.is_some_and(|(t, sb)| self.recent(t) && (sb || !req.sandbox)) {
                        joined.push(req);
                    } else {
                        queued.push(req);
                    }
                }
                _ = poll.tick(), if idle => {
                    if self.sysctls_changed() {
                        want_full = true;
                    }
                }
                _ = tokio::time::sleep_until(due.into()), if idle => want_full = true,
                done = async {
                    match running.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if running.is_some() => {
                    running = None;
                    let started = running_since.take().map_or_else(Instant::now, |(t, _)| t);
                    let (report, sandbox) = match done {
                        Ok(r) => r,
                        Err(e) => {
                            warn!("observation task failed: {e}");
                            continue;
                        }
                    };
                    let report = self.publish(report, sandbox, started);
                    for w in joined.drain(..) {
                        let _ = w.reply.send(report.clone());
                    }
                }
                _ = tokio::time::sleep_until(earliest.into()), if idle && !queued.is_empty() => {}
            }
            let may_start =
                running.is_none() && Instant::now() >= self.last_full + self.timing.min_refresh;
            if may_start && (want_full || !queued.is_empty()) {
                let sandbox = queued.iter().any(|q| q.sandbox);
                joined.append(&mut queued);
                want_full = false;
                running_since = Some((Instant::now(), sandbox));
                running = Some(self.spawn(sandbox));
            }
        }
    }

    fn recent(&self, started: Instant) -> bool {
        started.elapsed() < self.timing.min_refresh
    }

    /// The published report, if its observation started recently enough to
    /// answer a refresh arriving now.
    fn fresh_enough(&self, sandbox: bool) -> Option<Arc<Report>> {
        let ok = self.recent(self.last_started)
            && (!sandbox || self.last_sandbox.is_some_and(|t| self.recent(t)));
        ok.then(|| self.tx.borrow().clone())
    }

    fn sysctls_changed(&self) -> bool {
        let now = observe::sysctl_snapshot(&self.cfg);
        let current = self.tx.borrow();
        now.iter().any(|s| {
            report::find_sysctl(&current, &s.name).map(|c| (c.state, c.value.as_str()))
                != Some((s.state, s.value.as_str()))
        })
    }

    fn spawn(&mut self, sandbox: bool) -> Running {
        let cfg = self.cfg.clone();
        self.counters.observations.fetch_add(1, Ordering::Relaxed);
        if sandbox {
            self.counters.sandbox_probes.fetch_add(1, Ordering::Relaxed);
        }
        tokio::spawn(async move { (observe::observe(&cfg, Scope { sandbox }).await, sandbox) })
    }

    /// Stamps and publishes a finished observation; wakes watchers only when
    /// something changed.
    fn publish(&mut self, mut report: Report, sandbox: bool, started: Instant) -> Arc<Report> {
        self.last_full = Instant::now();
        self.last_started = started;
        if sandbox {
            self.last_sandbox = Some(started);
        } else if let (Some(g), Some(prev)) =
            (report.gvisor.as_mut(), self.tx.borrow().gvisor.as_ref())
        {
            // Carry the last sandbox result forward: it stays true until rerun.
            if self.last_sandbox.is_some() {
                g.sandbox = prev.sandbox.clone();
                observe::summarise(g);
            }
        }
        let changed = finish(&mut report, &self.started_at, &mut self.gens);
        stamp_counters(&mut report, &self.counters);
        let report = Arc::new(report);
        if changed {
            let lines = report::changes(&self.tx.borrow(), &report);
            info!(generation = report.generation, changes = ?lines, "observed change");
            warn_failed_probes(&report);
        }
        // Always store the newest (observed_at moves); wake watchers only on change.
        self.tx.send_if_modified(|slot| {
            *slot = report.clone();
            changed
        });
        report
    }
}
