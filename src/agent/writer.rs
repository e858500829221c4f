//! The Node writer (`serve --kubeconfig`): keeps the agent's own Node's
//! sandbox condition, per-handler labels and desired-state annotation.
//!
//! A task beside the owner: it reads the reports the owner publishes and
//! asks the service for the verdict `Check` with an empty request gives,
//! like any client, so it never delays a gRPC answer or an observation.
//! Writes follow Node Problem Detector (a strategic merge patch of
//! `status.conditions` on `nodes/NAME/status`,
//! kubernetes/node-problem-detector
//! `pkg/exporters/k8sexporter/condition/manager.go`): at once when the
//! verdict changes, otherwise a heartbeat every `heartbeat`.
//!
//! Every verdict's condition is followed by the verdict-boot annotation
//! (the bootID of the observation it was made on), never sent before it, so
//! a reader that sees the annotation equal to the Node's bootID knows the
//! condition is this boot's. A restart does not flap: until the first
//! complete verdict (with the canaries and sandbox probe it needs) a
//! condition made on this boot is left as it is; a Node without one gets
//! `Unknown`/`NoVerdictYet`, and one made on another boot (after a reboot)
//! `Unknown`/`NotCheckedThisBoot` with its handler labels `unknown`, at
//! once, so nothing says "ready" for a boot nobody checked. Faults (timeouts,
//! 5xx, 429, 403, 404) are retried with backoff and jitter, logged once
//! per change of state and counted for the metrics. SIGTERM ends the task
//! at once: the condition then goes stale (its heartbeat ages).

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, SystemTime},
};

use tokio::{sync::watch, time::Instant};
use tracing::{error, info, warn};

use crate::{
    agent::service::Service,
    evaluate,
    kube::{self, kubeconfig::Auth, Client, KubeError, NodeView},
    metrics::NodeWriterStats,
    nodestatus::{
        condition::{self, Wanted},
        identity::{self, NameError},
        labels::{self, LabelError},
        patch::{self, Meta},
        VERDICT_BOOT_ANNOTATION,
    },
    proto::v1::{DesiredState, Report, Verdict},
};

/// What `serve --kubeconfig` was asked to write.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub kubeconfig: PathBuf,
    /// `--node-name`; else the node credential's `system:node:NAME`.
    pub node_name: Option<String>,
    pub condition_type: String,
    /// A write at least this often when nothing changed.
    pub heartbeat: Duration,
    pub handler_labels: bool,
    /// Deadline of one request.
    pub request_timeout: Duration,
    /// The Node is read again this often: a deleted and re-registered Node
    /// (a new uid), or a condition someone else changed, is rewritten then.
    pub resync: Duration,
    /// The `sandbox-readiness.io/desired` annotation's value (the
    /// desired-state library's JSON); `None`: not written.
    pub desired_annotation: Option<String>,
    /// A verdict whose observation is older than this is not written (nor
    /// re-asserted by a heartbeat): `Unknown` / `ObservationStale` instead.
    pub max_observation_age: Duration,
}

/// How old the report's observation is at `now` (`None`: no time in it).
/// Pure.
pub fn observation_age(report: &Report, now: SystemTime) -> Option<Duration> {
    let t = report.observed_at.as_ref()?;
    let at = SystemTime::UNIX_EPOCH
        + Duration::new(u64::try_from(t.seconds).ok()?, u32::try_from(t.nanos).ok()?);
    Some(now.duration_since(at).unwrap_or_default())
}

/// Why the writer cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("--kubeconfig needs a desired state (--sysctl, --require-*): without one the condition would say nothing")]
    NoDesiredState,
    #[error("{0}")]
    ConditionType(String),
    #[error(transparent)]
    Label(#[from] LabelError),
    #[error(transparent)]
    NodeName(#[from] NameError),
    #[error("--kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::kubeconfig::KubeconfigError,
    },
    #[error("--node-heartbeat and --node-resync must be more than 0")]
    ZeroInterval,
}

/// Checks what can be checked before anything starts (exit 2 on any of
/// it). Files that are not there yet (kubelet has not bootstrapped) are
/// waited for later; a kubeconfig that is there and holds a credential
/// that names no Node needs `--node-name` now.
pub fn precheck(cfg: &WriterConfig, defaults: &DesiredState) -> Result<(), WriterError> {
    if evaluate::is_empty(defaults) {
        return Err(WriterError::NoDesiredState);
    }
    if cfg.heartbeat.is_zero() || cfg.resync.is_zero() {
        return Err(WriterError::ZeroInterval);
    }
    condition::validate_type(&cfg.condition_type).map_err(WriterError::ConditionType)?;
    if cfg.handler_labels {
        labels::validate_handlers(defaults)?;
    }
    if let Some(n) = &cfg.node_name {
        identity::node_name(Some(n), None)?;
        return Ok(());
    }
    let Ok(text) = crate::hostio::read_capped(&cfg.kubeconfig, 256 * 1024) else {
        return Ok(());
    };
    let dir = cfg.kubeconfig.parent().unwrap_or(std::path::Path::new("/"));
    let k = kube::kubeconfig::parse(&text, dir).map_err(|source| WriterError::Kubeconfig {
        path: cfg.kubeconfig.clone(),
        source,
    })?;
    match k.auth {
        Auth::Certificate {
            cert: kube::kubeconfig::Material::Inline(pem),
            ..
        } => {
            let cn = first_cert_cn(&pem);
            identity::node_name(None, cn.as_deref())?;
        }
        Auth::Certificate { .. } => {}
        Auth::Token(_) | Auth::TokenFile(_) | Auth::Anonymous => {
            return Err(NameError::NoSubject.into());
        }
    }
    Ok(())
}

fn first_cert_cn(pem: &[u8]) -> Option<String> {
    use rustls_pki_types::{pem::PemObject, CertificateDer};
    let cert = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    identity::subject_common_name(&cert)
}

/// The writer's counters, read by the metrics.
#[derive(Debug, Default)]
pub struct Stats {
    writes: AtomicU64,
    failures: Mutex<BTreeMap<&'static str, u64>>,
    last_success: Mutex<Option<SystemTime>>,
}

impl Stats {
    pub fn snapshot(&self) -> NodeWriterStats {
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        let last_success = self
            .last_success
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        NodeWriterStats {
            writes: self.writes.load(Ordering::Relaxed),
            failures,
            last_success,
        }
    }

    fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) = Some(SystemTime::now());
    }

    fn failed(&self, reason: &'static str) {
        *self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
    }
}

/// Backoff after `failures` failed attempts in a row: 1 s doubling to
/// `cap`, ±25 % jitter (so a fleet that lost its API server does not come
/// back in step), never below a `Retry-After`. A 404 (the Node is not
/// registered yet) is retried at least every 10 s, so a fresh node is
/// written within seconds of registering. Pure but for the jitter.
pub fn backoff(failures: u32, e: &KubeError, jitter: f64) -> Duration {
    let cap = if e.status() == Some(404) {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(60)
    };
    let base = Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(cap);
    let jittered = base.mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0)).min(cap);
    match e.retry_after() {
        Some(r) => jittered.max(r),
        None => jittered,
    }
}

/// How long a Node whose `status.nodeInfo.bootID` is empty (kubelet has
/// not posted its status yet) is waited for before writing anyway.
pub const EMPTY_BOOT_ID_WAIT: Duration = Duration::from_secs(60);
/// How often the Node is read again while its bootID is empty.
const BOOT_ID_POLL: Duration = Duration::from_secs(2);
/// How often credentials that are not there yet are looked for.
const CREDENTIAL_POLL: Duration = Duration::from_secs(2);

/// What an attempt ended with, short of an error.
enum Step {
    Done,
    /// Nothing written; try again after this.
    Wait(Duration),
    /// The writer cannot go on (logged).
    Stop,
}

/// Why the writer did not write (logged once per change).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holding {
    None,
    Credentials(String),
    Fault(&'static str),
    BootMismatch(String),
    BootEmpty,
}

struct Writer {
    cfg: WriterConfig,
    service: Service,
    defaults: DesiredState,
    stats: Arc<Stats>,
    client: Client,
    name: Option<String>,
    node: Option<NodeView>,
    /// The Node as held before a resync's read: kept if the read (from the
    /// API server's cache) turns out older.
    known: Option<NodeView>,
    /// The verdict last computed, complete or a change since.
    verdict: Option<(Arc<Report>, Verdict)>,
    /// What the Node was last made to say.
    written: Option<(Wanted, BTreeMap<String, String>)>,
    last_status_write: Option<Instant>,
    last_get: Option<Instant>,
    boot_empty_since: Option<Instant>,
    holding: Holding,
    failures: u32,
    /// The uid of the Node last seen.
    seen_uid: Option<String>,
    /// Write even when the Node already says it (a re-registered Node, a
    /// heartbeat).
    force: bool,
    /// Whether leaving this boot's condition until the first verdict was
    /// logged (once, not at every resync).
    told_left: bool,
}

/// Runs the writer until `shutdown`.
pub async fn run(
    cfg: WriterConfig,
    service: Service,
    stats: Arc<Stats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let client = Client::new(&cfg.kubeconfig, cfg.request_timeout);
    let w = Writer {
        defaults: service.defaults().clone(),
        cfg,
        service,
        stats,
        client,
        name: None,
        node: None,
        known: None,
        verdict: None,
        written: None,
        last_status_write: None,
        last_get: None,
        boot_empty_since: None,
        holding: Holding::None,
        failures: 0,
        seen_uid: None,
        // The first complete verdict is written even when the Node already
        // says it: a heartbeat after a restart (the transition time stays).
        force: true,
        told_left: false,
    };
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => {}
        () = w.run() => {}
    }
}

type Check = tokio::task::JoinHandle<Option<(Arc<Report>, Verdict)>>;

impl Writer {
    fn spawn_check(&self) -> Check {
        let svc = self.service.clone();
        tokio::spawn(async move {
            match svc.default_verdict().await {
                Ok(v) => Some(v),
                Err(e) => {
                    warn!("node writer: no verdict: {}", e.message());
                    None
                }
            }
        })
    }

    async fn run(mut self) {
        info!(
            kubeconfig = %self.cfg.kubeconfig.display(),
            node_name = ?self.cfg.node_name,
            condition_type = %self.cfg.condition_type,
            heartbeat = %humantime::format_duration(self.cfg.heartbeat),
            handler_labels = self.cfg.handler_labels,
            "node writer starting"
        );
        let mut sub = self.service.state().subscribe();
        let mut check: Option<Check> = Some(self.spawn_check());
        let mut check_again: Option<Instant> = None;
        let mut complete = false;
        let mut next_attempt = Instant::now();
        loop {
            let far = Instant::now() + Duration::from_secs(86_400);
            let heartbeat_due = self
                .last_status_write
                .map_or(far, |t| t + self.cfg.heartbeat);
            let resync_due = self.last_get.map_or(far, |t| t + self.cfg.resync);
            let pending = self.wants_attempt(complete);
            tokio::select! {
                done = async {
                    match check.as_mut() {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if check.is_some() => {
                    check = None;
                    match done {
                        Ok(Some(v)) => {
                            self.verdict = Some(v);
                            complete = true;
                        }
                        // Asked again soon (before the first verdict) or
                        // at the next heartbeat.
                        _ if !complete => check_again = Some(Instant::now() + Duration::from_secs(5)),
                        _ => {}
                    }
                }
                () = tokio::time::sleep_until(check_again.unwrap_or(far)), if check.is_none() && check_again.is_some() => {
                    check_again = None;
                    check = Some(self.spawn_check());
                }
                changed = sub.changed(), if complete => {
                    if changed.is_err() {
                        return;
                    }
                    let report = sub.borrow_and_update().clone();
                    let verdict = evaluate::evaluate(&report, &self.defaults);
                    self.verdict = Some((report, verdict));
                }
                () = tokio::time::sleep_until(heartbeat_due), if complete && check.is_none() => {
                    // The heartbeat asks the full question again, so the
                    // canaries the defaults need are rerun when due.
                    self.force = true;
                    check = Some(self.spawn_check());
                    // Until it answers, the heartbeat is not due again.
                    self.last_status_write = Some(Instant::now());
                }
                () = tokio::time::sleep_until(resync_due) => {
                    // Read it again; what we hold stays for comparison (a
                    // cached read may not have caught up with our write).
                    self.known = self.node.take();
                    self.last_get = None;
                }
                () = tokio::time::sleep_until(next_attempt), if pending => {}
            }
            if Instant::now() < next_attempt || !self.wants_attempt(complete) {
                continue;
            }
            match self.attempt(complete).await {
                Ok(Step::Done) => {
                    if self.failures > 0 || self.holding != Holding::None {
                        info!(
                            failures = self.failures,
                            "node writer: writing to the Node again"
                        );
                    }
                    self.failures = 0;
                    self.holding = Holding::None;
                    next_attempt = Instant::now();
                }
                Ok(Step::Wait(d)) => next_attempt = Instant::now() + d,
                Ok(Step::Stop) => return,
                Err(e) => {
                    self.failures = self.failures.saturating_add(1);
                    let reason = e.reason();
                    self.stats.failed(reason);
                    if e.status() == Some(404) {
                        self.node = None;
                    }
                    let delay = backoff(self.failures, &e, fastrand::f64());
                    let holding = Holding::Fault(reason);
                    if self.holding != holding {
                        warn!(
                            reason,
                            retry_in = %humantime::format_duration(Duration::from_secs(delay.as_secs().max(1))),
                            "node writer: {e}"
                        );
                        self.holding = holding;
                    }
                    next_attempt = Instant::now() + delay;
                }
            }
        }
    }

    /// What the Node should say now.
    fn wanted(&self) -> (Wanted, BTreeMap<String, String>) {
        let (report, verdict) = match &self.verdict {
            Some((r, v)) => (Some(r.as_ref()), Some(v)),
            None => (None, None),
        };
        let stale = report
            .and_then(|r| observation_age(r, SystemTime::now()))
            .is_some_and(|age| age > self.cfg.max_observation_age);
        if stale {
            return (
                condition::observation_stale(self.cfg.max_observation_age),
                self.handler_labels(report, None),
            );
        }
        (
            condition::from_verdict(verdict),
            self.handler_labels(report, verdict),
        )
    }

    /// Whether there is anything to do: the Node to read, a first
    /// condition, or a change or heartbeat to write.
    fn wants_attempt(&self, complete: bool) -> bool {
        if self.name.is_none() || self.node.is_none() {
            return true;
        }
        if !complete {
            // Before the first complete verdict only a Node without the
            // condition, or with another boot's, gets one.
            return self.written.is_none() && self.before_verdict().is_some();
        }
        self.force || self.written.as_ref() != Some(&self.wanted())
    }

    fn hold(&mut self, h: Holding, log: impl FnOnce()) {
        if self.holding != h {
            log();
            self.holding = h;
        }
    }

    /// What the Node should say before the first complete verdict
    /// (`None`: leave it as it is).
    fn before_verdict(&self) -> Option<Wanted> {
        let n = self.node.as_ref()?;
        condition::before_first_verdict(
            condition::find(&n.conditions, &self.cfg.condition_type),
            n.annotations
                .get(VERDICT_BOOT_ANNOTATION)
                .map(String::as_str),
            &self.boot_id(),
        )
    }

    /// The bootID of the observation the verdict was made on: what the
    /// verdict-boot annotation says once its condition is written (empty:
    /// the observation could not read it).
    fn verdict_boot(&self) -> Option<String> {
        let (r, _) = self.verdict.as_ref()?;
        Some(
            r.node
                .as_ref()
                .map(|n| n.boot_id.clone())
                .unwrap_or_default(),
        )
    }

    /// This node's boot id, as observed.
    fn boot_id(&self) -> String {
        match &self.verdict {
            Some((r, _)) => r.node.as_ref().map(|n| n.boot_id.clone()),
            None => self
                .service
                .state()
                .latest()
                .node
                .as_ref()
                .map(|n| n.boot_id.clone()),
        }
        .unwrap_or_default()
    }

    async fn attempt(&mut self, complete: bool) -> Result<Step, KubeError> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => {
                let cn = match self.client.credential(false) {
                    Ok(l) => l.cert_cn.clone(),
                    Err(e) if e.is_missing() => {
                        let why = e.to_string();
                        self.hold(Holding::Credentials(why.clone()), || {
                            info!("node writer: waiting for the credential: {why}");
                        });
                        return Ok(Step::Wait(CREDENTIAL_POLL));
                    }
                    Err(e) => return Err(e.into()),
                };
                match identity::node_name(self.cfg.node_name.as_deref(), cn.as_deref()) {
                    Ok(n) => {
                        info!(node = %n, "node writer: writing Node {n}");
                        self.name = Some(n.clone());
                        n
                    }
                    Err(e) => {
                        error!("node writer stops: {e}");
                        return Ok(Step::Stop);
                    }
                }
            }
        };
        let node = match self.node.take() {
            Some(n) => n,
            None => {
                let n = self.client.get_node(&name).await?;
                self.last_get = Some(Instant::now());
                match self.known.take() {
                    Some(k) if crate::kube::client::older(&n, &k) => k,
                    _ => n,
                }
            }
        };
        self.see(node);
        let ours = self.boot_id();
        let theirs = self
            .node
            .as_ref()
            .map(|n| n.boot_id.clone())
            .unwrap_or_default();
        if theirs.is_empty() {
            let since = *self.boot_empty_since.get_or_insert_with(Instant::now);
            if since.elapsed() < EMPTY_BOOT_ID_WAIT {
                self.hold(Holding::BootEmpty, || {
                    info!("node writer: Node {name} has no status.nodeInfo.bootID yet (kubelet has not posted its status); waiting up to 60 s");
                });
                self.node = None;
                return Ok(Step::Wait(BOOT_ID_POLL));
            }
            if self.holding == Holding::BootEmpty {
                warn!("node writer: Node {name} still has no status.nodeInfo.bootID after 60 s; writing anyway");
                self.holding = Holding::None;
            }
        } else {
            self.boot_empty_since = None;
            if !ours.is_empty() && theirs != ours {
                let h = Holding::BootMismatch(theirs.clone());
                self.hold(h, || {
                    error!("node writer: Node {name} has bootID {theirs}, but this node booted as {ours}: it is another machine's Node (or kubelet has not updated it since this boot); writing nothing");
                });
                self.node = None;
                return Ok(Step::Wait(self.cfg.resync));
            }
        }
        if !complete {
            if self.written.is_some() {
                return Ok(Step::Done);
            }
            let Some(wanted) = self.before_verdict() else {
                if !self.told_left {
                    self.told_left = true;
                    let ours = self.boot_id();
                    let why = if ours.is_empty() {
                        "this node's boot id could not be read"
                    } else {
                        "it was made on this boot"
                    };
                    info!(
                        boot_id = %ours,
                        "node writer: the condition on Node {name} is left as it is until the first complete verdict: {why}"
                    );
                }
                return Ok(Step::Done);
            };
            let existing = self.existing();
            if !condition::says(existing.as_ref(), &wanted) {
                self.write_status(&name, &wanted).await?;
            }
            // Another boot's condition came with its labels: they go
            // `unknown` with it (the verdict-boot annotation stays, as no
            // verdict of this boot is written yet). A Node that had no
            // condition keeps its labels until the verdict, as before.
            let labels = if wanted.reason == condition::REASON_NOT_CHECKED_THIS_BOOT {
                let l = self.handler_labels(None, None);
                self.write_metadata(&name, &l, None).await?;
                l
            } else {
                BTreeMap::new()
            };
            self.written = Some((wanted, labels));
            return Ok(Step::Done);
        }
        let (wanted, labels) = self.wanted();
        let verdict_boot = self.verdict_boot();
        let existing = self.existing();
        // The annotation is sent only after the status patch of the
        // condition it dates: when it changes, that condition is written
        // now even if the Node already says it (a reboot's first verdict
        // equal to the last boot's).
        let boot_changes = self
            .meta()
            .is_some_and(|m| patch::verdict_boot_changes(&m, verdict_boot.as_deref()));
        if self.force || boot_changes || !condition::says(existing.as_ref(), &wanted) {
            self.write_status(&name, &wanted).await?;
        }
        self.write_metadata(&name, &labels, verdict_boot.as_deref())
            .await?;
        self.force = false;
        self.written = Some((wanted, labels));
        Ok(Step::Done)
    }

    /// The sandbox condition on the Node as held.
    fn existing(&self) -> Option<condition::NodeCondition> {
        self.node
            .as_ref()
            .and_then(|n| condition::find(&n.conditions, &self.cfg.condition_type).cloned())
    }

    /// The Node's labels and annotations as held.
    fn meta(&self) -> Option<Meta> {
        self.node.as_ref().map(|n| Meta {
            labels: n.labels.clone(),
            annotations: n.annotations.clone(),
        })
    }

    /// The handler labels for a verdict (none with `--handler-labels` off,
    /// so the ones the agent set before are removed).
    fn handler_labels(
        &self,
        report: Option<&Report>,
        verdict: Option<&Verdict>,
    ) -> BTreeMap<String, String> {
        if self.cfg.handler_labels {
            labels::wanted(report, verdict, &self.defaults)
        } else {
            BTreeMap::new()
        }
    }

    /// Makes the Node carry `labels`, the desired-state annotation and
    /// (`Some`) `verdict_boot`; nothing when it already does.
    async fn write_metadata(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
        verdict_boot: Option<&str>,
    ) -> Result<(), KubeError> {
        let body = self.meta().and_then(|m| {
            patch::metadata_patch(
                &m,
                labels,
                self.cfg.desired_annotation.as_deref(),
                verdict_boot,
            )
        });
        if let Some(body) = body {
            let n = self.client.patch_metadata(name, body).await?;
            self.stats.wrote();
            self.see(n);
        }
        Ok(())
    }

    async fn write_status(&mut self, name: &str, wanted: &Wanted) -> Result<(), KubeError> {
        let existing = self.existing();
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let c = condition::next(&self.cfg.condition_type, existing.as_ref(), wanted, &now);
        if existing.as_ref().map(|e| e.status.as_str()) != Some(c.status.as_str()) {
            info!(status = %c.status, reason = %c.reason, message = %c.message, "node writer: condition {}", self.cfg.condition_type);
        }
        let n = self
            .client
            .patch_status(name, patch::status_patch(&c))
            .await?;
        self.stats.wrote();
        self.last_status_write = Some(Instant::now());
        self.see(n);
        Ok(())
    }

    /// Takes a Node as read or as a write returned it; a new uid is a
    /// re-registered Node: everything is written again at once.
    fn see(&mut self, n: NodeView) {
        if let Some(old) = self.seen_uid.clone() {
            if old != n.uid {
                info!(old_uid = %old, new_uid = %n.uid, "node writer: the Node was re-registered; writing it again");
                self.force = true;
                self.written = None;
            }
        }
        self.seen_uid = Some(n.uid.clone());
        self.node = Some(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<u64>) -> KubeError {
        KubeError::Status {
            method: "PATCH",
            path: "/".into(),
            code,
            message: String::new(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn backoff_grows_with_jitter_and_honours_retry_after() {
        let t = KubeError::Timeout(Duration::from_secs(10));
        assert_eq!(backoff(1, &t, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(3, &t, 0.5), Duration::from_secs(4));
        assert_eq!(backoff(30, &t, 0.5), Duration::from_secs(60));
        assert_eq!(backoff(1, &t, 0.0), Duration::from_millis(750));
        assert_eq!(backoff(1, &t, 1.0), Duration::from_millis(1250));
        // Never past the cap, jitter or not.
        assert_eq!(backoff(30, &t, 1.0), Duration::from_secs(60));
        // A Node not registered yet: at least every 10 s.
        assert_eq!(
            backoff(30, &status(404, None), 1.0),
            Duration::from_secs(10)
        );
        // 429 / 503 Retry-After is a floor.
        assert_eq!(
            backoff(1, &status(429, Some(7)), 0.5),
            Duration::from_secs(7)
        );
        assert_eq!(
            backoff(30, &status(503, Some(1)), 0.5),
            Duration::from_secs(60)
        );
    }

    fn cfg() -> WriterConfig {
        WriterConfig {
            kubeconfig: "/nonexistent/kubeconfig".into(),
            node_name: None,
            condition_type: crate::nodestatus::DEFAULT_CONDITION_TYPE.into(),
            heartbeat: Duration::from_secs(300),
            handler_labels: true,
            request_timeout: Duration::from_secs(10),
            resync: Duration::from_secs(10),
            desired_annotation: None,
            max_observation_age: Duration::from_secs(120),
        }
    }

    #[test]
    fn an_old_observation_is_not_reasserted() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |secs: i64| Report {
            observed_at: Some(pbjson_types::Timestamp {
                seconds: secs,
                nanos: 0,
            }),
            ..Report::default()
        };
        assert_eq!(
            observation_age(&at(1_000_000 - 30), now),
            Some(Duration::from_secs(30))
        );
        // A clock that went back: age 0, never negative.
        assert_eq!(
            observation_age(&at(1_000_000 + 5), now),
            Some(Duration::ZERO)
        );
        assert_eq!(observation_age(&Report::default(), now), None);
        let w = condition::observation_stale(Duration::from_secs(120));
        assert_eq!(w.status, crate::nodestatus::condition::Status::Unknown);
        assert_eq!(w.reason, "ObservationStale");
        assert!(w.message.contains("older than 2m"), "{}", w.message);
    }

    #[test]
    fn prechecks() {
        let some = DesiredState {
            require_userns: true,
            ..DesiredState::default()
        };
        let err = |c: &WriterConfig, d: &DesiredState| {
            precheck(c, d)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&cfg(), &DesiredState::default()).contains("needs a desired state"));
        // Files not there yet: waited for.
        assert!(precheck(&cfg(), &some).is_ok());
        let bad_type = WriterConfig {
            condition_type: "bad type".into(),
            ..cfg()
        };
        assert!(err(&bad_type, &some).contains("condition type"));
        let bad_handler = DesiredState {
            require_runtime_handlers: vec!["runsc-".into()],
            ..DesiredState::default()
        };
        assert!(err(&cfg(), &bad_handler).contains("label key"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let k = dir.path().join("kubeconfig");
        std::fs::write(&k, "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: aGVsbG8=\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: abc}\n").unwrap_or_else(|e| panic!("{e}"));
        let token = WriterConfig {
            kubeconfig: k.clone(),
            ..cfg()
        };
        assert!(err(&token, &some).contains("give --node-name"));
        let named = WriterConfig {
            node_name: Some("worker-1".into()),
            ..token
        };
        assert!(precheck(&named, &some).is_ok());
        let bad_name = WriterConfig {
            node_name: Some("Worker 1".into()),
            ..named
        };
        assert!(err(&bad_name, &some).contains("not a valid Node name"));
    }
}
