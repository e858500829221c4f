//! The observation cache: the handle requests use, and what the owner task
//! observes through.
//!
//! One task owns observing (the owner module): it polls the sysctls
//! cheaply, runs a full observation on a timer, on a noticed change and on
//! demand, and publishes each result through a `watch` channel. Requests never
//! observe themselves: they read the latest report, ask the owner for a fresh
//! one (refresh coalescing), or ask it to track sysctls the report does not
//! hold yet. So however many requests arrive, at most one observation runs at
//! a time, and only the owner touches the host.

use std::sync::{atomic::Ordering, Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};

pub use crate::agent::{
    owner::Timing,
    source::{
        CanaryFuture, HostSource, ImageFuture, ObservationFuture, Source, SweepFuture,
        SysctlsFuture,
    },
};
use crate::{
    agent::{
        owner::{self, Counters, Request},
        tracked::Tracked,
    },
    observe::ObserveConfig,
    proto::v1::Report,
    report,
};

/// The shared handle requests use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    latest: watch::Receiver<Arc<Report>>,
    requests: mpsc::Sender<Request>,
    counters: Arc<Counters>,
    tracked: Arc<Mutex<Tracked>>,
}

/// Why the owner could not answer.
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
        self.ask(Request::Refresh { sandbox, reply }, rx).await
    }

    /// A report holding a canary for each of `handlers` that finished at
    /// most `canary_interval` ago (run now when none did), shared with
    /// concurrent callers. The caller has checked the handlers are allowed.
    pub async fn canaries(&self, handlers: Vec<String>) -> Result<Arc<Report>, StateError> {
        let (reply, rx) = oneshot::channel();
        self.ask(Request::Canaries { handlers, reply }, rx).await
    }

    /// Keeps `names` (validated sysctl names) in every report from now on,
    /// until nobody asked for them for a while, and returns a report that
    /// holds them: the latest one when it already does, else the one the
    /// owner publishes after reading them. Asking again renews them.
    pub async fn track(&self, names: &[String]) -> Result<Arc<Report>, StateError> {
        let latest = self.latest();
        let missing = names
            .iter()
            .any(|n| report::find_sysctl(&latest, n).is_none());
        let added = self.lock_tracked().touch(names, owner::now());
        if !added && !missing {
            return Ok(latest);
        }
        let (reply, rx) = oneshot::channel();
        self.ask(Request::Track { reply }, rx).await
    }

    async fn ask(
        &self,
        request: Request,
        rx: oneshot::Receiver<Arc<Report>>,
    ) -> Result<Arc<Report>, StateError> {
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StateError::Busy,
            mpsc::error::TrySendError::Closed(_) => StateError::Stopped,
        })?;
        let report = rx.await.map_err(|_| StateError::Stopped)?;
        Ok(self.with_counters(report))
    }

    fn lock_tracked(&self) -> std::sync::MutexGuard<'_, Tracked> {
        // The lock is never held across an await or a panic point; a poisoned
        // lock still holds a usable set.
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The agent's own numbers for the metrics (watchers and connections
    /// are the server's: zero here).
    pub fn stats(&self) -> crate::metrics::AgentStats {
        let c = &self.counters;
        crate::metrics::AgentStats {
            observations: c.observations.load(Ordering::Relaxed),
            sandbox_probes: c.sandbox_probes.load(Ordering::Relaxed),
            canaries: c.canaries.load(Ordering::Relaxed),
            refreshes: c.refreshes.load(Ordering::Relaxed),
            observation_duration: c.observation_duration.snapshot(),
            ..Default::default()
        }
    }

    /// Fills the agent counters (not part of the fingerprint).
    pub fn with_counters(&self, report: Arc<Report>) -> Arc<Report> {
        let obs = self.counters.observations.load(Ordering::Relaxed);
        let sb = self.counters.sandbox_probes.load(Ordering::Relaxed);
        let cn = self.counters.canaries.load(Ordering::Relaxed);
        match &report.agent {
            Some(a) if a.observations == obs && a.sandbox_probes == sb && a.canaries == cn => {
                report
            }
            _ => {
                let mut r = (*report).clone();
                let agent = r.agent.get_or_insert_with(Default::default);
                agent.observations = obs;
                agent.sandbox_probes = sb;
                agent.canaries = cn;
                Arc::new(r)
            }
        }
    }
}

/// Runs the first observation of the host, then starts the owner task.
/// Returns the handle and the task (which ends when every `State` is dropped
/// or on `shutdown`).
pub async fn start(
    cfg: ObserveConfig,
    timing: Timing,
    shutdown: watch::Receiver<bool>,
) -> (State, tokio::task::JoinHandle<()>) {
    let base = cfg.extra_sysctls.clone();
    start_with(Arc::new(HostSource::new(cfg)), base, timing, shutdown).await
}

/// [`start`] with any [`Source`]; `base` are the sysctls every observation
/// reads besides the user namespace ones (the serve defaults' names).
pub async fn start_with(
    source: Arc<dyn Source>,
    base: Vec<String>,
    timing: Timing,
    shutdown: watch::Receiver<bool>,
) -> (State, tokio::task::JoinHandle<()>) {
    let counters = Arc::new(Counters::default());
    let tracked = Arc::new(Mutex::new(Tracked::default()));
    // Bounded: a flood of requests beyond this is refused, not queued forever.
    let (requests, rx) = mpsc::channel(4096);
    let (latest, task) = owner::start(
        source,
        base,
        timing,
        counters.clone(),
        tracked.clone(),
        rx,
        shutdown,
    )
    .await;
    (
        State {
            latest,
            requests,
            counters,
            tracked,
        },
        task,
    )
}
