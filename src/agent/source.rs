//! What the owner task observes through: the host in the agent, a scripted
//! node in the owner's tests. Implementations do the I/O; the owner only
//! schedules.

use std::{future::Future, pin::Pin, sync::Arc};

use crate::{
    observe::{
        self,
        canary::{self, CanaryRun},
        ObserveConfig, Observer, Scope,
    },
    proto::v1::{Canary, Probe, Report, Sysctl},
};

/// A full observation in progress.
pub type ObservationFuture = Pin<Box<dyn Future<Output = Report> + Send>>;
/// A sysctl read in progress.
pub type SysctlsFuture = Pin<Box<dyn Future<Output = Vec<Sysctl>> + Send>>;
/// A CRI canary in progress.
pub type CanaryFuture = Pin<Box<dyn Future<Output = CanaryRun> + Send>>;
/// A question to the image store in progress: is the sandbox image there?
pub type ImageFuture = Pin<Box<dyn Future<Output = bool> + Send>>;
/// A sweep of leftover canary sandboxes in progress.
pub type SweepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the owner observes through: the host in the agent, a scripted node in
/// the owner's tests. Implementations do the I/O; the owner only schedules.
pub trait Source: Send + Sync + 'static {
    /// A full observation that also reads the `extra` sysctls; `carried` is
    /// the last sandbox probe result, kept in the report when this
    /// observation does not rerun the probe (it stays true until rerun).
    fn observe(
        &self,
        scope: Scope,
        extra: Vec<String>,
        carried: Option<Probe>,
    ) -> ObservationFuture;
    /// The cheap part of an observation: the user namespace sysctls and
    /// `extra`, to notice a change between full observations.
    fn sysctls(&self, extra: Vec<String>) -> SysctlsFuture;
    /// One CRI canary for `handler` (the owner runs one at a time).
    fn canary(&self, handler: String) -> CanaryFuture {
        Box::pin(std::future::ready(CanaryRun {
            canary: Canary {
                result: Some(observe::skipped("not run: this source has no CRI")),
                handler,
                ..Canary::default()
            },
            image_missing: false,
        }))
    }
    /// Whether the runtime's sandbox image is in its store now (asked while
    /// a canary waits for it; a question that fails is a "no").
    fn sandbox_image_present(&self) -> ImageFuture {
        Box::pin(std::future::ready(false))
    }
    /// Removes canary sandboxes an earlier agent left behind.
    fn sweep_canaries(&self) -> SweepFuture {
        Box::pin(std::future::ready(()))
    }
}

/// The real source: this host, through one long-lived observer (it keeps
/// what outlives an observation, such as the `runsc --version` answer).
#[derive(Debug)]
pub struct HostSource {
    observer: Arc<Observer>,
}

impl HostSource {
    pub fn new(cfg: ObserveConfig) -> Self {
        Self {
            observer: Arc::new(Observer::new(cfg)),
        }
    }
}

impl Source for HostSource {
    fn observe(
        &self,
        scope: Scope,
        extra: Vec<String>,
        carried: Option<Probe>,
    ) -> ObservationFuture {
        let observer = self.observer.clone();
        Box::pin(async move {
            let mut raw = observer.observe_raw(scope, &extra).await;
            // Merged before the one derive step, so the summary covers it.
            if let (Some(probe), Some(g)) = (carried, raw.report.gvisor.as_mut()) {
                g.sandbox = Some(probe);
            }
            raw.into_report()
        })
    }

    fn canary(&self, handler: String) -> CanaryFuture {
        let cfg = self.observer.config().clone();
        Box::pin(async move { canary::run(&cfg.gvisor.cri_endpoint, &cfg.canary, &handler).await })
    }

    fn sandbox_image_present(&self) -> ImageFuture {
        let cfg = self.observer.config().clone();
        Box::pin(async move {
            match canary::sandbox_image_present(&cfg.gvisor.cri_endpoint, cfg.gvisor.cri_timeout)
                .await
            {
                Ok(present) => present,
                Err(e) => {
                    // Asked every few seconds: not worth a warning each time.
                    tracing::debug!("cannot ask the image store for the sandbox image: {e}");
                    false
                }
            }
        })
    }

    fn sweep_canaries(&self) -> SweepFuture {
        let cfg = self.observer.config().clone();
        Box::pin(async move {
            // Bounded like any CRI question; what it could not remove now,
            // the next canary's own sweep removes.
            let swept = tokio::time::timeout(
                cfg.gvisor.cri_timeout,
                canary::sweep_endpoint(&cfg.gvisor.cri_endpoint),
            )
            .await;
            match swept {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!(removed = n, "removed canary sandboxes left behind"),
                Ok(Err(e)) => tracing::warn!("cannot sweep canary sandboxes at start: {e}"),
                Err(_) => tracing::warn!(
                    "cannot sweep canary sandboxes at start: the CRI did not answer in time"
                ),
            }
        })
    }

    fn sysctls(&self, extra: Vec<String>) -> SysctlsFuture {
        let observer = self.observer.clone();
        // Off the runtime thread, like the observation's own reads: a read
        // that blocks must not stop health or the cached answers.
        Box::pin(async move {
            observe::off_thread(move || observe::sysctl_snapshot(observer.config(), &extra))
                .await
                .unwrap_or_default()
        })
    }
}
