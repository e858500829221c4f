//! The owner task: the only code in the agent that observes.
//!
//! It polls the sysctls cheaply every `poll`, runs a full observation every
//! `probe`, on a noticed change and on demand, and publishes each result.
//! A refresh is answered by an observation that started at most
//! `min_refresh` before it arrived (the published one, the running one, or
//! the next), so a burst of any size costs at most two observations and none
//! starts sooner than `min_refresh` after the previous one.
//!
//! Canaries run one at a time, for the handlers of serve's own desired
//! state on a schedule (`canary_retry`: soon after a result short of
//! PASSED until the first pass, then every `canary_interval`) and for
//! requests; while one waits for the sandbox image, the owner asks the
//! image store every couple of seconds and runs it as soon as the image
//! is there.
//!
//! Time is tokio's, so the loop runs under paused time in its tests.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{
    sync::{mpsc, oneshot, watch},
    time::Instant,
};
use tracing::{info, warn};

use crate::{
    agent::{
        canary_retry::{Kind, Retry, IMAGE_POLL},
        source::Source,
        tracked::Tracked,
    },
    metrics::DurationHistogram,
    observe::{canary::CanaryRun, pb_timestamp, probe, Scope},
    proto::v1::{Canary, Probe, ProbeOutcome, Report, Sysctl},
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
    /// No sandbox probe starts sooner than this after the previous one; a
    /// refresh asking for one in between gets the last result (its
    /// `ran_at` tells its age), so requests cannot keep `runsc do` running.
    pub min_sandbox: Duration,
    /// At most one CRI canary per handler per this once the handler has
    /// passed (before, `canary_retry` retries sooner); a request in between
    /// gets the last result (its `ran_at` tells its age).
    pub canary_interval: Duration,
    /// Handlers canaried on the agent's own schedule (serve's own desired
    /// state's): at start, then as `canary_retry` says; others only when a
    /// request requires them.
    pub canary_schedule: Vec<String>,
    /// Remove canary sandboxes left behind before anything else (set when
    /// canaries are allowed at all: otherwise the agent never changes the
    /// runtime's state).
    pub canary_sweep: bool,
}

/// What a request asks of the owner.
#[derive(Debug)]
pub(crate) enum Request {
    /// A report from an observation that started at most `min_refresh`
    /// before the request (with a sandbox probe when asked).
    Refresh {
        sandbox: bool,
        reply: oneshot::Sender<Arc<Report>>,
    },
    /// Read the newly tracked sysctls now and publish them.
    Track { reply: oneshot::Sender<Arc<Report>> },
    /// A report holding a canary no older than `canary_interval` for each
    /// handler (allowed ones only: the service checks). Canaries run one at
    /// a time; requests for the same handler share one run.
    Canaries {
        handlers: Vec<String>,
        reply: oneshot::Sender<Arc<Report>>,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) observations: AtomicU64,
    pub(crate) sandbox_probes: AtomicU64,
    /// Refresh requests received (metrics only).
    pub(crate) refreshes: AtomicU64,
    /// How long each full observation took (metrics only).
    pub(crate) observation_duration: DurationHistogram,
    pub(crate) canaries: AtomicU64,
}

/// The owner's clock (tokio's, pausable in tests).
pub fn now() -> Instant {
    Instant::now()
}

/// Runs the first observation, publishes it and spawns the loop.
pub(crate) async fn start(
    source: Arc<dyn Source>,
    base: Vec<String>,
    timing: Timing,
    counters: Arc<Counters>,
    tracked: Arc<Mutex<Tracked>>,
    requests: mpsc::Receiver<Request>,
    shutdown: watch::Receiver<bool>,
) -> (watch::Receiver<Arc<Report>>, tokio::task::JoinHandle<()>) {
    let started_at = pb_timestamp(std::time::SystemTime::now());
    let first_started = now();
    let mut gens = Generations::default();
    let mut first = source.observe(Scope::default(), base.clone(), None).await;
    counters.observations.fetch_add(1, Ordering::Relaxed);
    counters
        .observation_duration
        .observe(first_started.elapsed());
    let incomplete = report::keep_last_good(&Report::default(), &mut first);
    finish(&mut first, &started_at, &mut gens);
    stamp_counters(&mut first, &counters);
    note_incomplete(&mut first, incomplete);
    log_first(&first);
    let (tx, rx) = watch::channel(Arc::new(first));
    let owner = Owner {
        source,
        base,
        timing,
        tx,
        gens,
        started_at,
        counters,
        tracked,
        last_full: now(),
        last_started: first_started,
        last_sandbox: None,
        canaries: BTreeMap::new(),
        image_check_at: None,
        canary_queue: VecDeque::new(),
        canary_waiters: Vec::new(),
        canary_running: None,
    };
    (rx, tokio::spawn(owner.run(requests, shutdown)))
}

struct Owner {
    source: Arc<dyn Source>,
    /// Sysctls every observation reads (the serve defaults' names).
    base: Vec<String>,
    timing: Timing,
    tx: watch::Sender<Arc<Report>>,
    gens: Generations,
    started_at: pbjson_types::Timestamp,
    counters: Arc<Counters>,
    tracked: Arc<Mutex<Tracked>>,
    last_full: Instant,
    /// When the published observation started.
    last_started: Instant,
    /// When the last sandbox probe started (its result is carried forward).
    last_sandbox: Option<Instant>,
    /// The last canary of each handler and when the next is due; every
    /// published report carries them.
    canaries: BTreeMap<String, HandlerCanaries>,
    /// When to ask the image store next whether the sandbox image a
    /// canary waits for has come.
    image_check_at: Option<Instant>,
    canary_queue: VecDeque<String>,
    canary_waiters: Vec<CanaryWaiter>,
    /// The handler whose canary runs now.
    canary_running: Option<String>,
}

/// What the owner keeps of one handler's canaries.
struct HandlerCanaries {
    last: Canary,
    /// A request before then gets `last`; a scheduled handler runs then.
    due: Instant,
    /// Due as soon as the image store holds the sandbox image.
    on_image: bool,
    retry: Retry,
}

/// A request waiting for canaries of `pending` handlers.
struct CanaryWaiter {
    pending: Vec<String>,
    reply: oneshot::Sender<Arc<Report>>,
}

/// A refresh waiting for an observation.
struct Waiter {
    sandbox: bool,
    reply: tokio::sync::oneshot::Sender<Arc<Report>>,
}

type Running = tokio::task::JoinHandle<(Report, bool)>;

impl Owner {
    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut poll = tokio::time::interval(self.timing.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.reset();
        let mut running: Option<Running> = None;
        // When the running observation started, and whether it probes a sandbox.
        let mut running_since: Option<(Instant, bool)> = None;
        // Waiters of the observation that is running, and of the next one.
        let mut joined: Vec<Waiter> = Vec::new();
        let mut queued: Vec<Waiter> = Vec::new();
        let mut want_full = false;
        if self.timing.canary_sweep {
            self.source.sweep_canaries().await;
        }
        let mut canary: Option<tokio::task::JoinHandle<CanaryRun>> = None;
        let mut image_check: Option<tokio::task::JoinHandle<bool>> = None;
        loop {
            let idle = running.is_none();
            let due = self.last_full + self.timing.probe;
            let earliest = self.last_full + self.timing.min_refresh;
            let scheduled = self.next_scheduled_canary();
            let image_at = self.image_check_at.filter(|_| image_check.is_none());
            tokio::select! {
                _ = shutdown.changed() => return,
                req = requests.recv() => {
                    match req {
                        None => return,
                        Some(Request::Track { reply }) => {
                            let _ = reply.send(self.publish_tracked().await);
                        }
                        Some(Request::Canaries { handlers, reply }) => {
                            self.ask_canaries(handlers, reply);
                        }
                        Some(Request::Refresh { sandbox, reply }) => {
                            self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
                            let sandbox = sandbox && !self.sandbox_recent();
                            let w = Waiter { sandbox, reply };
                            if let Some(report) = self.fresh_enough(sandbox) {
                                let _ = w.reply.send(report);
                            } else if running_since.is_some_and(|(t, sb)| self.recent(t) && (sb || !sandbox)) {
                                joined.push(w);
                            } else {
                                queued.push(w);
                            }
                        }
                    }
                }
                _ = poll.tick(), if idle => {
                    self.lock_tracked().expire(now());
                    if self.sysctls_changed().await {
                        want_full = true;
                    }
                }
                _ = tokio::time::sleep_until(due), if idle => want_full = true,
                done = async {
                    match running.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if running.is_some() => {
                    running = None;
                    let started = running_since.take().map_or_else(now, |(t, _)| t);
                    self.counters.observation_duration.observe(started.elapsed());
                    let (report, sandbox) = match done {
                        Ok(r) => r,
                        Err(e) => {
                            warn!("observation task failed: {e}");
                            continue;
                        }
                    };
                    let report = self.publish(report, sandbox, started).await;
                    for w in joined.drain(..) {
                        let _ = w.reply.send(report.clone());
                    }
                }
                _ = tokio::time::sleep_until(earliest), if idle && !queued.is_empty() => {}
                done = async {
                    match canary.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if canary.is_some() => {
                    canary = None;
                    let handler = self.canary_running.take().unwrap_or_default();
                    let result = done.unwrap_or_else(|e| CanaryRun {
                        canary: Canary {
                            handler: handler.clone(),
                            result: Some(probe(ProbeOutcome::Error, 0, format!("the canary task stopped: {e}"), Duration::ZERO)),
                            ..Canary::default()
                        },
                        image_missing: false,
                    });
                    self.finish_canary(handler, result);
                }
                // Only handlers neither queued nor running count, so a
                // handler whose result is due cannot spin the loop.
                _ = tokio::time::sleep_until(scheduled.unwrap_or_else(now)), if scheduled.is_some() => {
                    for h in self.timing.canary_schedule.clone() {
                        if !self.canary_recent(&h) {
                            self.enqueue_canary(h);
                        }
                    }
                }
                _ = tokio::time::sleep_until(image_at.unwrap_or_else(now)), if image_at.is_some() => {
                    self.image_check_at = None;
                    if self.canaries.values().any(|c| c.on_image) {
                        image_check = Some(tokio::spawn(self.source.sandbox_image_present()));
                    }
                }
                present = async {
                    match image_check.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if image_check.is_some() => {
                    image_check = None;
                    self.image_checked(present.unwrap_or(false));
                }
            }
            if canary.is_none() {
                if let Some(h) = self.canary_queue.pop_front() {
                    self.counters.canaries.fetch_add(1, Ordering::Relaxed);
                    canary = Some(tokio::spawn(self.source.canary(h.clone())));
                    self.canary_running = Some(h);
                }
            }
            let may_start = running.is_none() && now() >= self.last_full + self.timing.min_refresh;
            if may_start && (want_full || !queued.is_empty()) {
                let sandbox = queued.iter().any(|q| q.sandbox) && !self.sandbox_recent();
                joined.append(&mut queued);
                want_full = false;
                running_since = Some((now(), sandbox));
                running = Some(self.spawn(sandbox));
            }
        }
    }

    /// Whether `handler`'s last canary is still current: its next is not
    /// due yet (see `canary_retry`).
    fn canary_recent(&self, handler: &str) -> bool {
        self.canaries.get(handler).is_some_and(|c| now() < c.due)
    }

    /// When the next scheduled canary is due, among the scheduled handlers
    /// neither queued nor running (never run: now).
    fn next_scheduled_canary(&self) -> Option<Instant> {
        self.timing
            .canary_schedule
            .iter()
            .filter(|h| self.canary_running.as_ref() != Some(*h) && !self.canary_queue.contains(*h))
            .map(|h| self.canaries.get(h).map_or_else(now, |c| c.due))
            .min()
    }

    /// The image store answered: when the sandbox image is there, every
    /// canary waiting for it is due now (scheduled ones run at once,
    /// others on the next request); else ask again later.
    fn image_checked(&mut self, present: bool) {
        let waiting = self.canaries.values().any(|c| c.on_image);
        if !waiting {
            return;
        }
        if !present {
            self.image_check_at = Some(now() + IMAGE_POLL);
            return;
        }
        info!("the sandbox image is in the runtime's image store: running the canaries that waited for it");
        let at = now();
        for c in self.canaries.values_mut().filter(|c| c.on_image) {
            c.on_image = false;
            c.due = at;
        }
    }

    fn enqueue_canary(&mut self, handler: String) {
        if self.canary_running.as_ref() != Some(&handler) && !self.canary_queue.contains(&handler) {
            self.canary_queue.push_back(handler);
        }
    }

    /// Answers at once when every handler's canary is recent; else queues
    /// the others and waits for them.
    fn ask_canaries(&mut self, handlers: Vec<String>, reply: oneshot::Sender<Arc<Report>>) {
        let mut pending: Vec<String> = Vec::new();
        for h in handlers {
            if !self.canary_recent(&h) && !pending.contains(&h) {
                pending.push(h);
            }
        }
        if pending.is_empty() {
            let _ = reply.send(self.tx.borrow().clone());
            return;
        }
        for h in &pending {
            self.enqueue_canary(h.clone());
        }
        self.canary_waiters.push(CanaryWaiter { pending, reply });
    }

    /// Keeps the canary, says when the next is due, publishes it and
    /// answers whoever waited only for it.
    fn finish_canary(&mut self, handler: String, run: CanaryRun) {
        let result = run.canary;
        let outcome = result
            .result
            .as_ref()
            .map_or(ProbeOutcome::Unspecified, Probe::outcome);
        if let Some(r) = result.result.as_ref() {
            if matches!(outcome, ProbeOutcome::Failed | ProbeOutcome::Error) {
                warn!(probe = "canary", handler = %handler, "{}", r.message);
            }
        }
        let at = now();
        let entry = self
            .canaries
            .entry(handler.clone())
            .or_insert_with(|| HandlerCanaries {
                last: Canary::default(),
                due: at,
                on_image: false,
                retry: Retry::default(),
            });
        let next = entry.retry.record(
            Kind::of(outcome, run.image_missing),
            self.timing.canary_interval,
        );
        entry.last = result;
        entry.due = at + next.after;
        entry.on_image = next.on_image;
        if outcome != ProbeOutcome::Passed {
            let retry = humantime::format_duration(next.after);
            if next.on_image {
                info!(handler = %handler, "the canary waits for the sandbox image: asking the image store every {} (and running it again in {retry} at the latest)", humantime::format_duration(IMAGE_POLL));
            } else {
                info!(handler = %handler, "the canary did not pass: running it again in {retry}");
            }
        }
        if next.on_image && self.image_check_at.is_none() {
            self.image_check_at = Some(at + IMAGE_POLL);
        }
        let current = Report::clone(&self.tx.borrow());
        let report = self.store(current);
        for mut w in std::mem::take(&mut self.canary_waiters) {
            w.pending.retain(|h| *h != handler);
            if w.pending.is_empty() {
                let _ = w.reply.send(report.clone());
            } else if !w.reply.is_closed() {
                self.canary_waiters.push(w);
            }
        }
    }

    fn lock_tracked(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The serve defaults' sysctls, then the tracked ones.
    fn extra_names(&self) -> Vec<String> {
        let mut names = self.base.clone();
        for n in self.lock_tracked().names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    fn recent(&self, started: Instant) -> bool {
        started.elapsed() < self.timing.min_refresh
    }

    /// Whether the last sandbox probe started less than `min_sandbox` ago.
    fn sandbox_recent(&self) -> bool {
        self.last_sandbox
            .is_some_and(|t| t.elapsed() < self.timing.min_sandbox)
    }

    /// The published report, if its observation started recently enough to
    /// answer a refresh arriving now.
    fn fresh_enough(&self, sandbox: bool) -> Option<Arc<Report>> {
        let ok = self.recent(self.last_started)
            && (!sandbox || self.last_sandbox.is_some_and(|t| self.recent(t)));
        ok.then(|| self.tx.borrow().clone())
    }

    async fn sysctls_changed(&self) -> bool {
        let now = self.source.sysctls(self.extra_names()).await;
        let current = self.tx.borrow();
        // A read that failed for want of the agent's own descriptors says
        // nothing about the node.
        now.iter()
            .filter(|s| !report::sysctl_read_hit_agent_limits(s))
            .any(|s| {
                report::find_sysctl(&current, &s.name).map(|c| (c.state, c.value.as_str()))
                    != Some((s.state, s.value.as_str()))
            })
    }

    fn spawn(&mut self, sandbox: bool) -> Running {
        self.counters.observations.fetch_add(1, Ordering::Relaxed);
        if sandbox {
            self.counters.sandbox_probes.fetch_add(1, Ordering::Relaxed);
        }
        // The last sandbox result stays true until the probe reruns.
        let carried = (!sandbox && self.last_sandbox.is_some())
            .then(|| {
                self.tx
                    .borrow()
                    .gvisor
                    .as_ref()
                    .and_then(|g| g.sandbox.clone())
            })
            .flatten();
        let observation = self
            .source
            .observe(Scope { sandbox }, self.extra_names(), carried);
        tokio::spawn(async move { (observation.await, sandbox) })
    }

    /// Reads tracked sysctls the published report lacks (asked for while an
    /// observation ran, or just now) into `report.sysctls`.
    async fn fill_tracked(&self, report: &mut Report) {
        let missing: Vec<String> = self
            .extra_names()
            .into_iter()
            .filter(|n| report::find_sysctl(report, n).is_none())
            .collect();
        if missing.is_empty() {
            return;
        }
        let read: Vec<Sysctl> = self
            .source
            .sysctls(missing.clone())
            .await
            .into_iter()
            .filter(|s| missing.contains(&s.name))
            .collect();
        report.sysctls.extend(read);
    }

    /// Publishes the current report with newly tracked sysctls read in.
    async fn publish_tracked(&mut self) -> Arc<Report> {
        let mut report = Report::clone(&self.tx.borrow());
        self.fill_tracked(&mut report).await;
        self.store(report)
    }

    /// Stamps and publishes a finished observation.
    async fn publish(
        &mut self,
        mut report: Report,
        sandbox: bool,
        started: Instant,
    ) -> Arc<Report> {
        self.last_full = now();
        self.last_started = started;
        if sandbox {
            self.last_sandbox = Some(started);
        }
        self.fill_tracked(&mut report).await;
        let incomplete = report::keep_last_good(&self.tx.borrow(), &mut report);
        self.store_noting(report, incomplete)
    }

    /// [`Self::store`], saying what the observation missed (outside the
    /// fingerprint: it is about the agent, not the node).
    fn store_noting(&mut self, report: Report, incomplete: Vec<String>) -> Arc<Report> {
        let mut report = report;
        self.merge_canaries(&mut report);
        let changed = finish(&mut report, &self.started_at, &mut self.gens);
        note_incomplete(&mut report, incomplete);
        self.store_stamped(report, changed)
    }

    /// Stores `report` as the newest; wakes watchers only when something
    /// observed changed (`observed_at` moves on every observation anyway).
    fn store(&mut self, mut report: Report) -> Arc<Report> {
        self.merge_canaries(&mut report);
        let changed = finish(&mut report, &self.started_at, &mut self.gens);
        self.store_stamped(report, changed)
    }

    /// Every report carries the last canary of each handler.
    fn merge_canaries(&self, report: &mut Report) {
        report.canaries = self.canaries.values().map(|c| c.last.clone()).collect();
    }

    fn store_stamped(&mut self, mut report: Report, changed: bool) -> Arc<Report> {
        stamp_counters(&mut report, &self.counters);
        let report = Arc::new(report);
        if changed {
            let lines = report::changes(&self.tx.borrow(), &report);
            info!(generation = report.generation, changes = ?lines, "observed change");
            warn_failed_probes(&report);
        }
        self.tx.send_if_modified(|slot| {
            *slot = report.clone();
            changed
        });
        report
    }
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
    agent.canaries = counters.canaries.load(Ordering::Relaxed);
}

/// Records (and logs) what the observation could not read because the
/// agent ran out of its own resources.
fn note_incomplete(report: &mut Report, incomplete: Vec<String>) {
    if !incomplete.is_empty() {
        warn!(
            missed = ?incomplete,
            "observation incomplete: the agent ran out of its own resources; the last good values are kept"
        );
    }
    report.agent.get_or_insert_with(Default::default).incomplete = incomplete;
}

fn log_first(r: &Report) {
    let u = r.user_namespaces.as_ref();
    let limit = u
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
    let failed = |p: Option<&Probe>| {
        p.filter(|p| matches!(p.outcome(), ProbeOutcome::Failed | ProbeOutcome::Error))
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

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
