//! The `ReadinessService` gRPC handlers. They only move data: reports come
//! from the observation cache ([`State`]), verdicts from [`evaluate`].

use std::{pin::Pin, sync::Arc, time::Duration};

use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::{wrappers::ReceiverStream, Stream, StreamExt};
use tonic::{Request, Response, Status};
use tracing::debug;

use crate::{
    agent::{
        state::{State, StateError},
        token,
    },
    evaluate,
    proto::v1::{
        readiness_service_server::ReadinessService, CheckRequest, CheckResponse, DesiredState,
        GetReportRequest, GetReportResponse, Report, Verdict, WatchRequest, WatchResponse,
    },
};

/// Messages buffered per watcher before a watcher that does not read is dropped.
const WATCH_BUFFER: usize = 8;

/// A Watch message waiting in its watcher's channel. Boxed because the
/// channel allocates its slots up front, in blocks of 32, and an unboxed
/// `Result<WatchResponse, Status>` is 1,072 bytes (a whole `Report` inline):
/// 34 KiB per watcher before any message was sent (benches/README.md).
type Slot = Box<Result<WatchResponse, Status>>;

/// The service; cheap to clone.
#[derive(Debug, Clone)]
pub struct Service {
    state: State,
    /// The desired state `Check` uses when a request carries none.
    defaults: Arc<DesiredState>,
    watchers: Arc<Semaphore>,
    max_watchers: usize,
    heartbeat: Duration,
    shutdown: watch::Receiver<bool>,
    /// Handlers a canary may run for (`--allow-canary`).
    allowed_canaries: Arc<Vec<String>>,
}

impl Service {
    pub fn new(
        state: State,
        defaults: DesiredState,
        max_watchers: usize,
        heartbeat: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            state,
            defaults: Arc::new(defaults),
            watchers: Arc::new(Semaphore::new(max_watchers)),
            max_watchers,
            heartbeat,
            shutdown,
            allowed_canaries: Arc::new(Vec::new()),
        }
    }

    /// Watch streams open now.
    pub fn watchers_open(&self) -> usize {
        self.max_watchers
            .saturating_sub(self.watchers.available_permits())
    }

    /// Lets requests require canaries for these handlers (none by default).
    #[must_use]
    pub fn allow_canaries(mut self, handlers: Vec<String>) -> Self {
        self.allowed_canaries = Arc::new(handlers);
        self
    }

    /// Refuses a desired state that requires a canary the agent may not
    /// run: a request must not make the agent change the node beyond what
    /// its operator allowed.
    fn refuse_unallowed(&self, desired: &DesiredState) -> Result<(), Status> {
        match desired
            .require_canary
            .iter()
            .find(|h| !self.allowed_canaries.contains(h))
        {
            Some(h) => Err(Status::failed_precondition(format!(
                "this agent does not run the CRI canary for handler {h}: start it with --allow-canary {h}"
            ))),
            None => Ok(()),
        }
    }

    /// The canaries `desired` needs for `report` that the agent may run.
    /// The required ones are all allowed ([`Self::refuse_unallowed`] ran
    /// first); those standing in for the sandbox probe run only if allowed.
    fn canaries_for(&self, report: &Report, desired: &DesiredState) -> Vec<String> {
        evaluate::canaries_needed(report, desired)
            .into_iter()
            .filter(|h| self.allowed_canaries.contains(h))
            .collect()
    }

    /// `report`, or a newer one holding recent canaries `desired` needs.
    async fn with_canaries(
        &self,
        report: Arc<Report>,
        desired: &DesiredState,
    ) -> Result<Arc<Report>, Status> {
        let handlers = self.canaries_for(&report, desired);
        if handlers.is_empty() {
            return Ok(report);
        }
        self.state.canaries(handlers).await.map_err(state_status)
    }

    /// The request's desired state, or the agent's defaults; validated.
    fn desired(&self, d: Option<DesiredState>) -> Result<DesiredState, Status> {
        let d = d
            .filter(|d| !evaluate::is_empty(d))
            .unwrap_or_else(|| (*self.defaults).clone());
        evaluate::validate(&d).map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(d)
    }

    /// The cached report, or a fresh one (with a sandbox probe when asked)
    /// shared with concurrent callers.
    async fn report(&self, refresh: bool, sandbox: bool) -> Result<Arc<Report>, Status> {
        if refresh || sandbox {
            self.state.fresh(sandbox).await.map_err(state_status)
        } else {
            Ok(self.state.latest())
        }
    }

    /// `report`, or a newer one that also holds every sysctl `desired`
    /// names: the owner task reads those (the service never touches the
    /// host) and keeps them in its polls, so a change to one wakes watchers
    /// like any other change.
    async fn with_requested_sysctls(
        &self,
        report: Arc<Report>,
        desired: &DesiredState,
    ) -> Result<Arc<Report>, Status> {
        if desired.sysctls.is_empty() {
            return Ok(report);
        }
        let names: Vec<String> = desired.sysctls.iter().map(|s| s.name.clone()).collect();
        self.state.track(&names).await.map_err(state_status)
    }
}

impl Service {
    /// The verdict `Check` with an empty request gives: the agent's
    /// defaults against the latest report, with the sandbox probe and the
    /// canaries they need (the Node writer's complete verdict).
    pub async fn default_verdict(&self) -> Result<(Arc<Report>, Verdict), Status> {
        let desired = (*self.defaults).clone();
        let report = self.report(false, desired.require_sandbox_probe).await?;
        let report = self.with_requested_sysctls(report, &desired).await?;
        let report = self.with_canaries(report, &desired).await?;
        let verdict = evaluate::evaluate(&report, &desired);
        Ok((report, verdict))
    }

    /// The agent's defaults.
    pub fn defaults(&self) -> &DesiredState {
        &self.defaults
    }

    /// The observation cache this service reads.
    pub fn state(&self) -> &State {
        &self.state
    }
}

fn state_status(e: StateError) -> Status {
    match e {
        StateError::Busy => Status::resource_exhausted(e.to_string()),
        StateError::Stopped => Status::unavailable(e.to_string()),
    }
}

#[tonic::async_trait]
impl ReadinessService for Service {
    async fn get_report(
        &self,
        request: Request<GetReportRequest>,
    ) -> Result<Response<GetReportResponse>, Status> {
        let req = request.into_inner();
        let report = self.report(req.refresh, req.sandbox_probe).await?;
        let key = token::report_key(&report);
        // Unchanged: the caller's own token goes back, nothing is cloned.
        if token::holds(&req.if_changed_from, key) {
            return Ok(Response::new(GetReportResponse {
                report: None,
                unchanged: true,
                token: req.if_changed_from,
            }));
        }
        Ok(Response::new(GetReportResponse {
            report: Some(Report::clone(&report)),
            unchanged: false,
            token: token::token(key),
        }))
    }

    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let req = request.into_inner();
        let desired = self.desired(req.desired)?;
        self.refuse_unallowed(&desired)?;
        let report = self
            .report(req.refresh, desired.require_sandbox_probe)
            .await?;
        let report = self.with_requested_sysctls(report, &desired).await?;
        let report = self.with_canaries(report, &desired).await?;
        let key = token::check_key(&report, &desired);
        if token::holds(&req.if_changed_from, key) {
            return Ok(Response::new(CheckResponse {
                verdict: None,
                report: None,
                unchanged: true,
                token: req.if_changed_from,
            }));
        }
        let verdict = evaluate::evaluate(&report, &desired);
        Ok(Response::new(CheckResponse {
            verdict: Some(verdict),
            report: Some(Report::clone(&report)),
            unchanged: false,
            token: token::token(key),
        }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let permit = self.watchers.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "too many watchers: at most {} Watch streams at once",
                self.max_watchers
            ))
        })?;
        // A connection at its maximum age ends its Watch streams cleanly;
        // the client reconnects on a new connection.
        let ends_at = request
            .extensions()
            .get::<crate::agent::listen::ConnInfo>()
            .and_then(|c| c.ends_at);
        let desired = self.desired(request.into_inner().desired)?;
        self.refuse_unallowed(&desired)?;
        if desired.require_sandbox_probe || !desired.require_canary.is_empty() {
            // The sandbox and canary results arrive as changes on the stream.
            let this = self.clone();
            let wanted = desired.clone();
            tokio::spawn(async move {
                let report = if wanted.require_sandbox_probe {
                    this.state.fresh(true).await
                } else {
                    Ok(this.state.latest())
                };
                if let Ok(r) = report {
                    let _ = this.with_canaries(r, &wanted).await;
                }
            });
        }
        // One slot more than the buffer: it stays free for the status that
        // tells a dropped slow watcher why its stream ended.
        let (tx, rx) = mpsc::channel(WATCH_BUFFER + 1);
        tokio::spawn(self.clone().watch_loop(tx, desired, permit, ends_at));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map(|m| *m))))
    }
}

impl Service {
    async fn watch_loop(
        self,
        tx: mpsc::Sender<Slot>,
        desired: DesiredState,
        _permit: OwnedSemaphorePermit,
        ends_at: Option<tokio::time::Instant>,
    ) {
        let aged = async move {
            match ends_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(aged);
        let mut sub = self.state.subscribe();
        let mut shutdown = self.shutdown.clone();
        let evaluate = !evaluate::is_empty(&desired);
        let message = |report: &Report| WatchResponse {
            verdict: evaluate
                .then(|| evaluate::evaluate(report, &desired))
                .or(None::<Verdict>),
            report: Some(report.clone()),
            heartbeat: false,
        };
        // "The last report still stands": no body, so a heartbeat costs a
        // few bytes per watcher, not a report each.
        let heartbeat_message = || WatchResponse {
            heartbeat: true,
            ..WatchResponse::default()
        };
        // Every message renews the watcher's sysctls with the owner, so they
        // stay tracked for as long as it listens.
        let first = sub.borrow_and_update().clone();
        let current = self.renewed(first, &desired).await;
        let current = self.state.with_counters(current);
        if tx.try_send(Box::new(Ok(message(&current)))).is_err() {
            return;
        }
        let mut last_generation = current.generation;
        loop {
            let heartbeat = tokio::time::sleep(self.heartbeat);
            let (report, heartbeat) = tokio::select! {
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
                () = &mut aged => return,
                changed = sub.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    (sub.borrow_and_update().clone(), false)
                }
                _ = heartbeat => (self.state.latest(), true),
            };
            let current = self.renewed(report, &desired).await;
            // A heartbeat that finds a newer report than the last one sent
            // sends it as a change: the watcher's `changed` may not have
            // been seen yet, and it would then find the generation sent.
            let msg = if current.generation != last_generation {
                last_generation = current.generation;
                message(&self.state.with_counters(current))
            } else if heartbeat {
                heartbeat_message()
            } else {
                continue;
            };
            if !self.send(&tx, msg) {
                return;
            }
        }
    }

    /// `with_requested_sysctls` for a watcher: when the owner cannot answer
    /// right now, the message goes out with the report as it is (a sysctl
    /// not read yet is judged on the next message).
    async fn renewed(&self, report: Arc<Report>, desired: &DesiredState) -> Arc<Report> {
        match self.with_requested_sysctls(report.clone(), desired).await {
            Ok(r) => r,
            Err(e) => {
                debug!("watcher's sysctls not renewed: {e}");
                report
            }
        }
    }

    /// Sends without waiting: a watcher whose buffer is full is not reading,
    /// and is dropped rather than allowed to hold memory.
    fn send(&self, tx: &mpsc::Sender<Slot>, msg: WatchResponse) -> bool {
        // Only this task sends on `tx`, so the capacity seen here cannot
        // shrink before the send below.
        if tx.capacity() <= 1 {
            debug!("dropping a Watch stream whose client does not read");
            let _ = tx.try_send(Box::new(Err(Status::resource_exhausted(format!(
                "watcher too slow: {WATCH_BUFFER} reports unread; dropped"
            )))));
            return false;
        }
        tx.try_send(Box::new(Ok(msg))).is_ok()
    }
}
