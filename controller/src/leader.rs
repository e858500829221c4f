//! Leader election on a `coordination.k8s.io/v1` Lease, so that of two (or
//! more) replicas only one writes Machine conditions and Events.
//!
//! The algorithm follows client-go's `tools/leaderelection`
//! (kubernetes/client-go `tools/leaderelection/leaderelection.go`,
//! `tryAcquireOrRenew` and `release`, v0.32): a candidate takes the Lease
//! when it does not exist, when its holder is empty (released), or when its
//! record has not changed for `lease_duration` *as observed on this
//! candidate's own clock* (so clock skew between replicas does not matter);
//! the holder renews every `retry` and gives up once it has not renewed
//! for `renew_deadline`. Every update carries the resourceVersion it read,
//! so two candidates can never both win one round (409 for the loser).
//!
//! Written on kube-rs rather than taken from a crate. kube-lease-manager
//! 0.13 does support kube 5; this stays because of the [`Gate`]: the write
//! path's "may I write" expires by itself at `renew_deadline` after the
//! last renewal even when the elector's task is stuck, which a lease
//! manager's "am I leader" flag, set by that task, cannot promise. The
//! loop is a page of code whose timing the tests measure.
//!
//! The [`Gate`] is what the controller's write path asks ("may I write
//! now?"). It is open only until `renew_deadline` after the start of the
//! last successful renewal, so a leader that cannot reach the API server
//! closes its own gate before any other candidate can take the Lease
//! (`renew_deadline` < `lease_duration`), even if this task is stuck.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    api::{ObjectMeta, PostParams},
    Api, Client,
};

/// Lease timing. The defaults are Kubernetes components' defaults
/// (kubernetes/component-base `config/v1alpha1/defaults.go`,
/// `RecommendedDefaultLeaderElectionConfiguration`: 15 s, 10 s, 2 s), which
/// give a new leader at most ~17 s after the old one died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// client-go's `JitterFactor`: waits are `retry .. retry * 1.2`.
const JITTER: f64 = 1.2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    #[error("leader election durations must be longer than zero")]
    Zero,
    #[error("--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline")]
    LeaseNotLonger,
    #[error("--leader-elect-renew-deadline must be longer than 1.2 × --leader-elect-retry-period")]
    DeadlineTooShort,
}

impl Timing {
    /// client-go's `NewLeaderElector` checks, as one-line errors.
    pub fn check(&self) -> Result<(), TimingError> {
        if self.lease_duration.is_zero()
            || self.renew_deadline.is_zero()
            || self.retry_period.is_zero()
        {
            return Err(TimingError::Zero);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingError::LeaseNotLonger);
        }
        if self.renew_deadline.as_secs_f64() <= JITTER * self.retry_period.as_secs_f64() {
            return Err(TimingError::DeadlineTooShort);
        }
        Ok(())
    }
}

/// "May this process write now?" Shared by the elector (which opens and
/// closes it) and the controller's write path (which asks before every
/// write).
#[derive(Debug, Clone)]
pub struct Gate(Arc<GateInner>);

#[derive(Debug)]
struct GateInner {
    /// No election: always open (a single replica, or tests of the loop).
    always: bool,
    /// Open until this instant.
    until: Mutex<Option<Instant>>,
    /// Told each time a closed gate opens: a new leader looks at every
    /// Machine again (as a standby it decided but wrote nothing).
    opened: tokio::sync::Notify,
}

impl Gate {
    /// Always open: leader election is off.
    pub fn always() -> Gate {
        Gate(Arc::new(GateInner {
            always: true,
            until: Mutex::new(None),
            opened: tokio::sync::Notify::new(),
        }))
    }

    /// Closed until an elector opens it.
    pub fn closed() -> Gate {
        Gate(Arc::new(GateInner {
            always: false,
            until: Mutex::new(None),
            opened: tokio::sync::Notify::new(),
        }))
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // A poisoned lock only means a panic elsewhere; the Option is
        // still a valid value.
        self.0.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn may_write(&self) -> bool {
        self.0.always || self.slot().is_some_and(|u| Instant::now() < u)
    }

    /// Whether leader election is on at all.
    pub fn elected(&self) -> bool {
        !self.0.always
    }

    fn open_until(&self, until: Instant) {
        let was_open = self.may_write();
        *self.slot() = Some(until);
        if !was_open {
            self.0.opened.notify_waiters();
        }
    }

    /// Resolves the next time a closed gate opens (never, without election).
    pub async fn opened(&self) {
        if self.0.always {
            std::future::pending::<()>().await;
        }
        self.0.opened.notified().await;
    }

    fn close(&self) {
        *self.slot() = None;
    }
}

/// What a Lease says, as compared between two reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub lease_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

impl Record {
    fn of(l: &Lease) -> Record {
        let s = l.spec.clone().unwrap_or_default();
        Record {
            holder: s.holder_identity.filter(|h| !h.is_empty()),
            lease_seconds: s.lease_duration_seconds.unwrap_or(0),
            acquire_time: s.acquire_time.map(|t| t.0),
            renew_time: s.renew_time.map(|t| t.0),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }

    fn spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: self.holder.clone(),
            lease_duration_seconds: Some(self.lease_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// The pure rule: given the record read, when this candidate first saw it
/// (its own clock), may `me` write a new record, and which?
/// `None`: someone else holds a lease that has not expired.
pub fn next_record(
    read: &Record,
    observed_at: Instant,
    now: Instant,
    me: &str,
    timing: &Timing,
    wall: Timestamp,
) -> Option<Record> {
    let mine = read.holder.as_deref() == Some(me);
    if !mine && read.holder.is_some() {
        // client-go uses the duration the record states, measured from our
        // observation of it.
        let held_for = Duration::from_secs(u64::try_from(read.lease_seconds.max(1)).unwrap_or(1));
        if now < observed_at + held_for {
            return None;
        }
    }
    let lease_seconds = i32::try_from(timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    Some(if mine {
        Record {
            holder: Some(me.to_string()),
            lease_seconds,
            acquire_time: read.acquire_time,
            renew_time: Some(wall),
            transitions: read.transitions,
        }
    } else {
        Record {
            holder: Some(me.to_string()),
            lease_seconds,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            // A takeover from a named holder is a transition; taking a
            // released Lease back is too (client-go counts any change of
            // holder).
            transitions: read.transitions.saturating_add(1),
        }
    })
}

/// Outcome of one round.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// This candidate holds the Lease (renewed at the instant given).
    Held(Instant),
    /// Another holder's lease is valid, or another candidate won the race.
    Other(Option<String>),
}

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    timing: Timing,
    gate: Gate,
    metrics: Arc<crate::metrics::Metrics>,
    /// The last record read and when this candidate first saw it.
    observed: Option<(Record, Instant)>,
    leading: bool,
    /// The holder last logged while standing by (logged once per holder).
    standing_by: Option<String>,
    /// This candidate's place in the jitter: a random fraction drawn once.
    /// Not the process id, which is 1 in every container.
    spread: f64,
}

/// A fraction in [0, 1) from the process's random hasher keys (std seeds
/// them from the OS), so no random crate is needed for one number.
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() % 10_000) as f64 / 10_000.0
}

impl Elector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
        gate: Gate,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            timing,
            gate,
            metrics,
            observed: None,
            leading: false,
            standing_by: None,
            spread: random_fraction(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn jittered(&self) -> Duration {
        // Spreads the candidates' retries so two replicas started together
        // do not ask at the same instants.
        self.timing
            .retry_period
            .mul_f64(1.0 + (JITTER - 1.0) * self.spread)
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Round, kube::Error> {
        let started = Instant::now();
        let wall = Timestamp::now();
        let current = match self.api.get_opt(&self.name).await? {
            Some(l) => l,
            None => {
                let rec = Record {
                    holder: Some(self.identity.clone()),
                    lease_seconds: i32::try_from(self.timing.lease_duration.as_secs().max(1))
                        .unwrap_or(i32::MAX),
                    acquire_time: Some(wall),
                    renew_time: Some(wall),
                    transitions: 0,
                };
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(rec.spec()),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => {
                        self.observed = Some((rec, started));
                        Ok(Round::Held(started))
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other(None)),
                    Err(e) => Err(e),
                };
            }
        };
        let read = Record::of(&current);
        let observed_at = match &self.observed {
            Some((r, at)) if *r == read => *at,
            _ => started,
        };
        self.observed = Some((read.clone(), observed_at));
        let Some(next) = next_record(
            &read,
            observed_at,
            started,
            &self.identity,
            &self.timing,
            wall,
        ) else {
            return Ok(Round::Other(read.holder));
        };
        let mut lease = current;
        lease.spec = Some(next.spec());
        // replace carries metadata.resourceVersion: a concurrent winner
        // makes this a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = Some((next, started));
                Ok(Round::Held(started))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other(None)),
            Err(e) => Err(e),
        }
    }

    /// Acquires, renews, and gives up as client-go does, the gate
    /// following, until `stop` resolves; then releases the Lease (bounded
    /// by `release_within`) and returns.
    pub async fn run_until(
        &mut self,
        stop: impl std::future::Future<Output = ()>,
        release_within: Duration,
    ) {
        let mut stop = std::pin::pin!(stop);
        loop {
            // Each attempt is bounded so a hung API server cannot keep a
            // renewal pending past the deadline unnoticed.
            let bound = self.timing.retry_period.max(Duration::from_secs(1));
            let attempt = tokio::select! {
                a = tokio::time::timeout(bound, self.try_acquire_or_renew()) => a,
                () = &mut stop => break,
            };
            self.settle(attempt);
            tokio::select! {
                () = tokio::time::sleep(self.jittered()) => {}
                () = &mut stop => break,
            }
        }
        self.gate.close();
        match tokio::time::timeout(release_within, self.release()).await {
            Ok(Ok(true)) => tracing::info!(identity = %self.identity, "lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the lease could not be released; a standby takes over when it expires")
            }
            Err(_) => tracing::warn!(
                "the lease release did not finish in time; a standby takes over when it expires"
            ),
        }
    }

    fn settle(&mut self, attempt: Result<Result<Round, kube::Error>, tokio::time::error::Elapsed>) {
        match attempt {
            Ok(Ok(Round::Held(at))) => {
                self.gate.open_until(at + self.timing.renew_deadline);
                self.metrics.set_leader(true);
                if !self.leading {
                    self.leading = true;
                    tracing::info!(identity = %self.identity, lease = %format!("{}/{}", self.namespace, self.name), "became the leader; writing");
                }
            }
            Ok(Ok(Round::Other(holder))) => {
                // Another holder: stop at once, whatever the deadline.
                self.gate.close();
                self.metrics.set_leader(false);
                if self.leading {
                    self.leading = false;
                    tracing::warn!(identity = %self.identity, holder = ?holder, "lost the lease; no longer writing");
                } else if holder.is_some() && holder != self.standing_by {
                    // Once per holder: an operator (and a test) can see that a
                    // standby is alive and found the Lease held.
                    tracing::info!(identity = %self.identity, holder = ?holder, "standing by; the lease is held");
                }
                if holder.is_some() {
                    self.standing_by = holder;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the Lease could not be read or written");
            }
            Err(_) => {
                tracing::debug!("the Lease request did not finish within the retry period");
            }
        }
        if self.leading && !self.gate.may_write() {
            self.leading = false;
            self.metrics.set_leader(false);
            tracing::warn!(identity = %self.identity, "the lease was not renewed within the renew deadline; no longer writing");
        }
    }

    /// Closes the gate and, if this candidate holds the Lease, hands it
    /// back (empty holder, 1 s duration: client-go's `release`), so a
    /// standby takes over at its next retry instead of after the lease
    /// duration.
    pub async fn release(&mut self) -> Result<bool, kube::Error> {
        self.gate.close();
        self.metrics.set_leader(false);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let read = Record::of(&lease);
        if read.holder.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let wall = Timestamp::now();
        let rec = Record {
            holder: None,
            lease_seconds: 1,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: read.transitions,
        };
        lease.spec = Some(rec.spec());
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        self.leading = false;
        Ok(true)
    }
}

/// This replica's identity: the pod's name in a cluster (unique among the
/// replicas), else the host name plus the process id and start time.
pub fn identity() -> String {
    if let Some(p) = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()) {
        return p;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{}_{nanos:08x}", std::process::id())
}

/// The Lease's namespace when no flag names it: the pod's (downward API
/// `POD_NAMESPACE`, else the ServiceAccount's mounted namespace), else
/// `default`.
pub fn default_namespace() -> String {
    if let Some(n) = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
    {
        return n;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: Option<&str>, secs: i32) -> Record {
        Record {
            holder: holder.map(str::to_string),
            lease_seconds: secs,
            acquire_time: None,
            renew_time: None,
            transitions: 3,
        }
    }

    #[test]
    fn timing_rules() {
        assert_eq!(Timing::default().check(), Ok(()));
        let t = Timing {
            renew_deadline: Duration::from_secs(15),
            ..Timing::default()
        };
        assert_eq!(t.check(), Err(TimingError::LeaseNotLonger));
        let t = Timing {
            retry_period: Duration::from_secs(9),
            ..Timing::default()
        };
        assert_eq!(t.check(), Err(TimingError::DeadlineTooShort));
        let t = Timing {
            retry_period: Duration::ZERO,
            ..Timing::default()
        };
        assert_eq!(t.check(), Err(TimingError::Zero));
    }

    #[test]
    fn another_holders_valid_lease_is_respected_until_it_expires() {
        let t = Timing::default();
        let seen = Instant::now();
        let wall = Timestamp::now();
        let r = rec(Some("b"), 15);
        assert_eq!(
            next_record(&r, seen, seen + Duration::from_secs(14), "a", &t, wall),
            None
        );
        let took = next_record(&r, seen, seen + Duration::from_secs(15), "a", &t, wall)
            .expect("expired lease is taken");
        assert_eq!(took.holder.as_deref(), Some("a"));
        assert_eq!(took.transitions, 4);
        assert_eq!(took.acquire_time, Some(wall));
    }

    #[test]
    fn released_lease_is_taken_at_once() {
        let t = Timing::default();
        let seen = Instant::now();
        let took = next_record(&rec(None, 1), seen, seen, "a", &t, Timestamp::now())
            .expect("released lease is taken");
        assert_eq!(took.holder.as_deref(), Some("a"));
        assert_eq!(took.lease_seconds, 15);
    }

    #[test]
    fn renewal_keeps_acquire_time_and_transitions() {
        let t = Timing::default();
        let seen = Instant::now();
        let mut r = rec(Some("a"), 15);
        let first = Timestamp::UNIX_EPOCH;
        r.acquire_time = Some(first);
        let wall = Timestamp::now();
        let renewed = next_record(&r, seen, seen, "a", &t, wall).expect("own lease is renewed");
        assert_eq!(renewed.acquire_time, Some(first));
        assert_eq!(renewed.renew_time, Some(wall));
        assert_eq!(renewed.transitions, 3);
    }

    #[test]
    fn gate_closes_by_itself_at_the_deadline() {
        let g = Gate::closed();
        assert!(!g.may_write());
        g.open_until(Instant::now() + Duration::from_millis(50));
        assert!(g.may_write());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!g.may_write());
        g.open_until(Instant::now() + Duration::from_secs(10));
        g.close();
        assert!(!g.may_write());
        assert!(Gate::always().may_write());
        assert!(!Gate::always().elected());
    }
}
