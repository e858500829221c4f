//! The owner loop under paused time, observing a scripted node: each test
//! drives requests and sysctl changes and checks what was observed when.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use crate::{
    agent::{
        state::{
            start_with, CanaryFuture, ImageFuture, ObservationFuture, Source, State, SysctlsFuture,
            Timing,
        },
        tracked::TRACK_TTL,
    },
    observe::{canary::CanaryRun, Scope},
    proto::v1::{Canary, Gvisor, Probe, ProbeOutcome, Report, Sysctl, SysctlState, UserNamespaces},
    report::find_sysctl,
};

const LIMIT: &str = "user.max_user_namespaces";

/// A node whose sysctls the test sets; observations take `delay` and are
/// recorded with their start time and scope.
struct Scripted {
    values: Mutex<BTreeMap<String, String>>,
    delay: Duration,
    starts: Mutex<Vec<(Instant, Scope)>>,
    /// Canaries run, by handler, in order, and when each started.
    canaries: Mutex<Vec<String>>,
    canary_starts: Mutex<Vec<Instant>>,
    /// What the next canaries find: the sandbox image there, the runtime
    /// able to start a sandbox.
    image: Mutex<bool>,
    works: Mutex<bool>,
    /// How often the image store was asked.
    image_questions: Mutex<usize>,
}

impl Scripted {
    fn new(delay: Duration) -> Arc<Self> {
        let mut values = BTreeMap::new();
        values.insert(LIMIT.to_string(), "0".to_string());
        Arc::new(Self {
            values: Mutex::new(values),
            delay,
            starts: Mutex::new(Vec::new()),
            canaries: Mutex::new(Vec::new()),
            canary_starts: Mutex::new(Vec::new()),
            image: Mutex::new(true),
            works: Mutex::new(true),
            image_questions: Mutex::new(0),
        })
    }

    fn set_image(&self, present: bool) {
        *self.image.lock().unwrap() = present;
    }

    fn set_works(&self, works: bool) {
        *self.works.lock().unwrap() = works;
    }

    fn canary_starts(&self) -> Vec<Instant> {
        self.canary_starts.lock().unwrap().clone()
    }

    fn set(&self, name: &str, value: &str) {
        self.values
            .lock()
            .unwrap()
            .insert(name.to_string(), value.to_string());
    }

    fn starts(&self) -> Vec<(Instant, Scope)> {
        self.starts.lock().unwrap().clone()
    }

    fn read(&self, name: &str) -> Sysctl {
        match self.values.lock().unwrap().get(name) {
            Some(v) => Sysctl {
                name: name.to_string(),
                value: v.clone(),
                state: SysctlState::Present as i32,
                ..Sysctl::default()
            },
            None => Sysctl {
                name: name.to_string(),
                state: SysctlState::Absent as i32,
                ..Sysctl::default()
            },
        }
    }
}

impl Source for Scripted {
    fn observe(
        &self,
        scope: Scope,
        extra: Vec<String>,
        carried: Option<Probe>,
    ) -> ObservationFuture {
        let n = {
            let mut starts = self.starts.lock().unwrap();
            starts.push((Instant::now(), scope));
            starts.len()
        };
        let userns = vec![self.read(LIMIT)];
        let sysctls = extra
            .iter()
            .filter(|e| *e != LIMIT)
            .map(|e| self.read(e))
            .collect();
        let sandbox = if scope.sandbox {
            Some(Probe {
                outcome: ProbeOutcome::Passed as i32,
                message: format!("sandbox run in observation {n}"),
                ..Probe::default()
            })
        } else {
            carried
        };
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Report {
                user_namespaces: Some(UserNamespaces {
                    sysctls: userns,
                    ..UserNamespaces::default()
                }),
                gvisor: Some(Gvisor {
                    sandbox,
                    ..Gvisor::default()
                }),
                sysctls,
                ..Report::default()
            }
        })
    }

    fn canary(&self, handler: String) -> CanaryFuture {
        let n = {
            let mut runs = self.canaries.lock().unwrap();
            runs.push(handler.clone());
            runs.len()
        };
        self.canary_starts.lock().unwrap().push(Instant::now());
        let image = *self.image.lock().unwrap();
        let works = *self.works.lock().unwrap();
        Box::pin(async move {
            // Without the image the canary stops after its first questions.
            let (outcome, took) = match (image, works) {
                (false, _) => (ProbeOutcome::Skipped, 10),
                (true, false) => (ProbeOutcome::Failed, 100),
                (true, true) => (ProbeOutcome::Passed, 500),
            };
            tokio::time::sleep(Duration::from_millis(took)).await;
            CanaryRun {
                canary: Canary {
                    result: Some(Probe {
                        outcome: outcome as i32,
                        message: format!("canary {n}"),
                        ..Probe::default()
                    }),
                    handler,
                    ..Canary::default()
                },
                image_missing: !image,
            }
        })
    }

    fn sandbox_image_present(&self) -> ImageFuture {
        *self.image_questions.lock().unwrap() += 1;
        let image = *self.image.lock().unwrap();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            image
        })
    }

    fn sysctls(&self, extra: Vec<String>) -> SysctlsFuture {
        let mut v = vec![self.read(LIMIT)];
        v.extend(extra.iter().filter(|e| *e != LIMIT).map(|e| self.read(e)));
        Box::pin(std::future::ready(v))
    }
}

fn timing() -> Timing {
    Timing {
        poll: Duration::from_secs(2),
        probe: Duration::from_secs(30),
        min_refresh: Duration::from_secs(1),
        min_sandbox: Duration::from_secs(30),
        canary_interval: Duration::from_secs(600),
        canary_schedule: Vec::new(),
        canary_sweep: false,
    }
}

async fn start(source: &Arc<Scripted>) -> (State, watch::Sender<bool>) {
    let (stop, shutdown) = watch::channel(false);
    let (state, _task) = start_with(source.clone(), Vec::new(), timing(), shutdown).await;
    (state, stop)
}

fn value(r: &Report, name: &str) -> Option<String> {
    find_sysctl(r, name).map(|s| s.value.clone())
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_refreshes_costs_at_most_two_observations() {
    let node = Scripted::new(Duration::from_millis(300));
    let (state, _stop) = start(&node).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asks: Vec<_> = (0..200)
        .map(|_| {
            let s = state.clone();
            tokio::spawn(async move { s.fresh(false).await })
        })
        .collect();
    for a in asks {
        a.await.unwrap().unwrap();
    }
    // The first observation at start, then one for the whole burst.
    assert_eq!(node.starts().len(), 2, "{:?}", node.starts());
}

#[tokio::test(start_paused = true)]
async fn no_observation_starts_sooner_than_min_refresh_after_the_last() {
    let node = Scripted::new(Duration::from_millis(10));
    let (state, _stop) = start(&node).await;
    for _ in 0..12 {
        state.fresh(false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let starts = node.starts();
    assert!(starts.len() >= 3, "{starts:?}");
    for pair in starts.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap >= timing().min_refresh,
            "observations {gap:?} apart: {starts:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_refresh_is_answered_by_an_observation_that_started_after_it_asked() {
    let node = Scripted::new(Duration::from_millis(50));
    let (state, _stop) = start(&node).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    node.set(LIMIT, "11255");
    let asked = Instant::now();
    let r = state.fresh(false).await.unwrap();
    assert_eq!(value(&r, LIMIT).as_deref(), Some("11255"));
    let (started, _) = *node.starts().last().unwrap();
    assert!(started >= asked - timing().min_refresh);
}

#[tokio::test(start_paused = true)]
async fn the_poll_notices_a_sysctl_change_within_one_interval() {
    let node = Scripted::new(Duration::from_millis(20));
    let (state, _stop) = start(&node).await;
    let mut sub = state.subscribe();
    let first = sub.borrow_and_update().clone();
    assert_eq!(value(&first, LIMIT).as_deref(), Some("0"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    node.set(LIMIT, "11255");
    let flipped = Instant::now();
    sub.changed().await.unwrap();
    let now = sub.borrow_and_update().clone();
    assert_eq!(value(&now, LIMIT).as_deref(), Some("11255"));
    assert_eq!(now.generation, first.generation + 1);
    let took = flipped.elapsed();
    assert!(
        took <= timing().poll + node.delay + Duration::from_millis(1),
        "{took:?}"
    );
    // Nothing else changed: no further generation before the next probe.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!sub.has_changed().unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_result_is_carried_until_the_probe_reruns() {
    let node = Scripted::new(Duration::from_millis(20));
    let (state, _stop) = start(&node).await;
    let r = state.fresh(true).await.unwrap();
    let sandbox = |r: &Report| r.gvisor.as_ref().and_then(|g| g.sandbox.clone());
    let first = sandbox(&r).expect("a sandbox result");
    // A periodic observation (no sandbox) keeps it, and publishes no change.
    let generation = r.generation;
    tokio::time::sleep(timing().probe * 2).await;
    let later = state.latest();
    assert!(node.starts().len() >= 3);
    assert!(node.starts()[2..].iter().all(|(_, s)| !s.sandbox));
    assert_eq!(sandbox(&later), Some(first));
    assert_eq!(later.generation, generation);
    assert_eq!(later.agent.as_ref().unwrap().sandbox_probes, 1);
}

#[tokio::test(start_paused = true)]
async fn a_tracked_sysctl_is_read_at_once_then_polled_then_forgotten() {
    let node = Scripted::new(Duration::from_millis(20));
    node.set("net.core.somaxconn", "4096");
    let (state, _stop) = start(&node).await;
    let names = vec!["net.core.somaxconn".to_string()];
    assert_eq!(value(&state.latest(), &names[0]), None);
    let observations = node.starts().len();

    let r = state.track(&names).await.unwrap();
    assert_eq!(value(&r, &names[0]).as_deref(), Some("4096"));
    // Read without a full observation, and a new generation for watchers.
    assert_eq!(node.starts().len(), observations);
    assert_eq!(state.latest().generation, r.generation);

    // A change to a tracked sysctl is noticed by the poll like any other.
    let mut sub = state.subscribe();
    sub.borrow_and_update();
    node.set("net.core.somaxconn", "128");
    sub.changed().await.unwrap();
    assert_eq!(
        value(&sub.borrow_and_update(), &names[0]).as_deref(),
        Some("128")
    );

    // Nobody asks again: after the TTL and the next full observation it is gone.
    tokio::time::sleep(TRACK_TTL + timing().probe * 2).await;
    assert_eq!(value(&state.latest(), &names[0]), None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_owner_and_refreshes_then_fail() {
    let node = Scripted::new(Duration::from_millis(20));
    let (stop, shutdown) = watch::channel(false);
    let (state, task) = start_with(node.clone(), Vec::new(), timing(), shutdown).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert!(state.fresh(false).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn sandbox_probes_are_min_sandbox_apart_and_callers_between_get_the_last() {
    let node = Scripted::new(Duration::from_millis(20));
    let (state, _stop) = start(&node).await;
    let sandbox = |r: &Report| r.gvisor.as_ref().and_then(|g| g.sandbox.clone());
    let first = sandbox(&state.fresh(true).await.unwrap()).expect("a sandbox result");
    // A refresh asking for a probe every 1.5 s for two minutes.
    let mut answers = Vec::new();
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        answers.push(sandbox(&state.fresh(true).await.unwrap()).expect("a sandbox result"));
    }
    let probes: Vec<Instant> = node
        .starts()
        .iter()
        .filter(|(_, s)| s.sandbox)
        .map(|(t, _)| *t)
        .collect();
    assert!(probes.len() >= 2, "{probes:?}");
    assert!(
        probes.len() <= 5,
        "{} sandbox probes in two minutes",
        probes.len()
    );
    for pair in probes.windows(2) {
        assert!(
            pair[1] - pair[0] >= timing().min_sandbox,
            "sandbox probes {:?} apart",
            pair[1] - pair[0]
        );
    }
    // Callers in between got the last result, not a new run.
    assert_eq!(answers[0], first);
    assert_eq!(
        state.latest().agent.as_ref().unwrap().sandbox_probes,
        probes.len() as u64
    );
}

#[tokio::test(start_paused = true)]
async fn the_metrics_stats_count_refreshes_and_time_each_observation() {
    let node = Scripted::new(Duration::from_millis(300));
    let (state, _stop) = start(&node).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    state.fresh(false).await.unwrap();
    state.fresh(false).await.unwrap();
    let stats = state.stats();
    assert_eq!(stats.refreshes, 2);
    // The first observation and the one for both refreshes (the second
    // was answered by it: it started less than min_refresh before).
    assert_eq!(stats.observations, 2, "{:?}", node.starts());
    let h = stats.observation_duration;
    assert_eq!(h.count, 2);
    // 300 ms each under paused time: in the 0.5 s bucket, not the 0.25 s one.
    assert_eq!(h.buckets[5], (0.25, 0));
    assert_eq!(h.buckets[6], (0.5, 2));
    assert!((h.sum_seconds - 0.6).abs() < 0.01, "{}", h.sum_seconds);
}

fn canary_message(r: &Report, handler: &str) -> String {
    r.canaries
        .iter()
        .find(|c| c.handler == handler)
        .and_then(|c| c.result.as_ref())
        .map(|p| p.message.clone())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn canaries_are_shared_kept_for_the_interval_and_run_one_at_a_time() {
    let node = Scripted::new(Duration::from_millis(10));
    let (state, _stop) = start(&node).await;
    let ask = |handlers: &[&str]| {
        let s = state.clone();
        let h: Vec<String> = handlers.iter().map(ToString::to_string).collect();
        tokio::spawn(async move { s.canaries(h).await.unwrap() })
    };
    // Concurrent requests for runc share one run; runsc waits its turn.
    let (a, b, c) = (ask(&["runc"]), ask(&["runc"]), ask(&["runc", "runsc"]));
    let (a, b, c) = (a.await.unwrap(), b.await.unwrap(), c.await.unwrap());
    assert_eq!(*node.canaries.lock().unwrap(), ["runc", "runsc"]);
    assert_eq!(canary_message(&a, "runc"), "canary 1");
    assert_eq!(canary_message(&b, "runc"), "canary 1");
    assert_eq!(canary_message(&c, "runsc"), "canary 2");
    assert_eq!(c.agent.as_ref().unwrap().canaries, 2);
    // Within the interval: the last result, nothing runs; every report
    // (observations too) carries it.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again = ask(&["runc"]).await.unwrap();
    assert_eq!(canary_message(&again, "runc"), "canary 1");
    let fresh = state.fresh(false).await.unwrap();
    assert_eq!(canary_message(&fresh, "runsc"), "canary 2");
    assert_eq!(node.canaries.lock().unwrap().len(), 2);
    // After it: run again.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let later = ask(&["runc"]).await.unwrap();
    assert_eq!(canary_message(&later, "runc"), "canary 3");
}

#[tokio::test(start_paused = true)]
async fn scheduled_canaries_run_at_start_and_every_interval() {
    let node = Scripted::new(Duration::from_millis(10));
    let (_stop, shutdown) = watch::channel(false);
    let timing = Timing {
        canary_schedule: vec!["runsc".into()],
        ..timing()
    };
    let (state, _task) = start_with(node.clone(), Vec::new(), timing, shutdown).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*node.canaries.lock().unwrap(), ["runsc"]);
    assert_eq!(canary_message(&state.latest(), "runsc"), "canary 1");
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert_eq!(*node.canaries.lock().unwrap(), ["runsc", "runsc"]);
}

fn scheduled(handler: &str) -> Timing {
    Timing {
        canary_schedule: vec![handler.into()],
        ..timing()
    }
}

fn canary_outcome(r: &Report, handler: &str) -> Option<ProbeOutcome> {
    r.canaries
        .iter()
        .find(|c| c.handler == handler)
        .and_then(|c| c.result.as_ref())
        .map(Probe::outcome)
}

/// Sleeps in small steps until `handler`'s canary in the latest report has
/// `outcome`; how long that took.
async fn until_outcome(state: &State, handler: &str, outcome: ProbeOutcome) -> Duration {
    let from = Instant::now();
    while canary_outcome(&state.latest(), handler) != Some(outcome) {
        assert!(
            from.elapsed() < Duration::from_secs(3600),
            "never {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    from.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_canary_waiting_for_its_image_runs_as_soon_as_the_image_comes() {
    let node = Scripted::new(Duration::from_millis(10));
    node.set_image(false);
    let (_stop, shutdown) = watch::channel(false);
    let (state, _task) = start_with(node.clone(), Vec::new(), scheduled("runc"), shutdown).await;
    until_outcome(&state, "runc", ProbeOutcome::Skipped).await;
    // The image store is asked every 2 s; no canary runs meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(node.canaries.lock().unwrap().len(), 1);
    let asked = *node.image_questions.lock().unwrap();
    assert!((2..=3).contains(&asked), "{asked} questions in 5 s");
    node.set_image(true);
    let took = until_outcome(&state, "runc", ProbeOutcome::Passed).await;
    // At most one poll (2 s) plus the canary itself (0.5 s).
    assert!(took <= Duration::from_millis(2600), "{took:?}");
    assert_eq!(node.canaries.lock().unwrap().len(), 2);
    // Passed: the interval governs, and nobody asks the image store.
    let asked = *node.image_questions.lock().unwrap();
    tokio::time::sleep(Duration::from_secs(590)).await;
    assert_eq!(node.canaries.lock().unwrap().len(), 2);
    assert_eq!(*node.image_questions.lock().unwrap(), asked);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(node.canaries.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failed_canary_is_retried_after_15_30_60_120_then_every_120_until_it_passes() {
    let node = Scripted::new(Duration::from_millis(10));
    node.set_works(false);
    let (_stop, shutdown) = watch::channel(false);
    let (state, _task) = start_with(node.clone(), Vec::new(), scheduled("runsc"), shutdown).await;
    // 0, 15, 45, 105, 225, 345 s (each run takes 0.1 s): six runs by 350 s.
    tokio::time::sleep(Duration::from_secs(350)).await;
    let starts = node.canary_starts();
    let gaps: Vec<u64> = starts
        .windows(2)
        .map(|p| (p[1] - p[0]).as_millis() as u64)
        .collect();
    assert_eq!(gaps, [15_100, 30_100, 60_100, 120_100, 120_100], "{gaps:?}");
    assert_eq!(
        canary_outcome(&state.latest(), "runsc"),
        Some(ProbeOutcome::Failed)
    );
    // The runtime is mended: the next retry (at 465 s) passes, and after
    // that the interval governs, failures included.
    node.set_works(true);
    until_outcome(&state, "runsc", ProbeOutcome::Passed).await;
    let passed_at = *node.canary_starts().last().unwrap();
    assert_eq!(passed_at - starts[5], Duration::from_millis(120_100));
    node.set_works(false);
    tokio::time::sleep(Duration::from_secs(1300)).await;
    let after: Vec<Duration> = node
        .canary_starts()
        .iter()
        .filter(|t| **t > passed_at)
        .map(|t| *t - passed_at)
        .collect();
    assert_eq!(
        after,
        [
            Duration::from_millis(600_500),
            Duration::from_millis(1_200_600)
        ]
    );
    assert_eq!(*node.image_questions.lock().unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_requested_canary_waiting_for_its_image_is_stale_once_the_image_comes() {
    let node = Scripted::new(Duration::from_millis(10));
    node.set_image(false);
    let (state, _stop) = start(&node).await;
    let ask = || {
        let s = state.clone();
        async move { s.canaries(vec!["runc".into()]).await.unwrap() }
    };
    let first = ask().await;
    assert_eq!(canary_outcome(&first, "runc"), Some(ProbeOutcome::Skipped));
    // Still no image: the last result, nothing runs.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(canary_message(&*ask().await, "runc"), "canary 1");
    // The image comes: after the next question to the image store, a
    // request runs the canary again (nothing runs without one).
    node.set_image(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node.canaries.lock().unwrap().len(), 1);
    let again = ask().await;
    assert_eq!(canary_outcome(&again, "runc"), Some(ProbeOutcome::Passed));
    assert_eq!(canary_message(&again, "runc"), "canary 2");
}
