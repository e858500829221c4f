//! The controller's wiring, as kube-runtime's `Controller` is wired: the
//! Machines are the reconciled kind (watched, slimmed before they are
//! cached); MachineDeployment and Cluster changes map to their Machines;
//! each workload cluster's Node changes map to the Machines they back
//! ([`Trigger`]); a TalosConfigTemplate change, the leader gate opening and
//! a resync every 10 minutes reconcile every Machine. Staleness needs no tick: a
//! reconcile requeues itself for the moment its verdict would go stale.

use std::{sync::Arc, time::Duration};

use futures_util::{stream, StreamExt};
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind},
    runtime::{
        controller::{Config as ControllerConfig, Controller},
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, ResourceExt,
};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{
    context::{key, Caches, Context, Settings},
    discovery,
    error::Error,
    http, machine,
    metrics::Metrics,
    reconcile,
    workload::{Reporting, Trigger},
};

/// The loop's tick: `/healthz` fails when it has consumed none for three
/// of these.
pub const RESYNC: Duration = Duration::from_secs(60);

/// Every Machine is looked at again every this many ticks (10 min), a
/// safety net only: each change that matters (a Machine, its pool, its
/// Cluster, its Node, the pool's template, the clock) already reconciles
/// it. At 10,000 Machines a reconcile of all of them every minute was most
/// of the controller's CPU at rest.
const FULL_RESYNC_TICKS: u64 = 10;

/// The caches no longer needed (workload clients, Nodes, per-Machine
/// state) are dropped every this many ticks (5 min): it reads every
/// Machine.
const PRUNE_TICKS: u64 = 5;

/// Machines reconciled at once: writes wait on the QPS bucket anyway.
const CONCURRENCY: u16 = 16;

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(discovery::GROUP, discovery::VERSION, kind),
        plural,
    )
}

/// A watched, slimmed, cached kind: its store and its stream of changed
/// objects (deletions included), which the controller polls.
fn cached(
    client: &Client,
    ar: &ApiResource,
    slim: fn(&mut DynamicObject),
) -> (
    Store<DynamicObject>,
    impl futures_util::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
) {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let stream = watcher(api, watcher::Config::default())
        .modify(slim)
        .reflect(writer)
        .backoff(crate::workload::reconnect_backoff());
    (store, stream)
}

/// The Machines of `namespace` that `pick` selects, as references.
fn machines_where(
    machines: &Store<DynamicObject>,
    ar: &ApiResource,
    namespace: &str,
    pick: impl Fn(&DynamicObject) -> bool,
) -> Vec<ObjectRef<DynamicObject>> {
    machines
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(namespace))
        .filter(|m| pick(m))
        .map(|m| ObjectRef::new_with(&m.name_any(), ar.clone()).within(namespace))
        .collect()
}

fn str_at<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// The Machines a workload [`Trigger`] concerns.
fn triggered(
    machines: &Store<DynamicObject>,
    ar: &ApiResource,
    t: &Trigger,
) -> Vec<ObjectRef<DynamicObject>> {
    match t {
        Trigger::Node {
            namespace,
            cluster,
            node,
        } => machines_where(machines, ar, namespace, |m| {
            str_at(&m.data, "/spec/clusterName") == Some(cluster)
                && str_at(&m.data, "/status/nodeRef/name") == Some(node)
        }),
        Trigger::Cluster { namespace, cluster } => machines_where(machines, ar, namespace, |m| {
            str_at(&m.data, "/spec/clusterName") == Some(cluster)
        }),
    }
}

/// Logs a management watch's failures once per episode.
fn log_failures<T>(what: &'static str) -> impl FnMut(&Result<T, watcher::Error>) {
    let mut failing = false;
    move |ev| match ev {
        Ok(_) if failing => {
            tracing::info!("the management cluster's {what} watch resumed");
            failing = false;
        }
        Ok(_) => {}
        Err(e) => {
            if !failing {
                tracing::warn!(error = %e, "the management cluster's {what} watch failed; retrying");
                failing = true;
            }
        }
    }
}

/// Runs the controller until the process is stopped. `events` is a client
/// of its own, behind a bucket of its own, as client-go's and
/// controller-runtime's event recorders have, so recording a transition
/// never takes a request from the condition writes.
pub async fn run(
    mgmt: Client,
    events: Client,
    settings: Settings,
    gate: crate::leader::Gate,
    metrics: Arc<Metrics>,
    endpoints: Option<tokio::net::TcpListener>,
) -> Result<(), Error> {
    let machine_ar = resource("Machine", "machines");
    let deployment_ar = resource("MachineDeployment", "machinedeployments");
    let cluster_ar = resource("Cluster", "clusters");
    let (machines, machine_stream) = cached(&mgmt, &machine_ar, machine::slim);
    let (deployments, deployment_stream) = cached(&mgmt, &deployment_ar, machine::slim_owner);
    let (clusters, cluster_stream) = cached(&mgmt, &cluster_ar, machine::slim_owner);
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<Trigger>();
    let (all_tx, all_rx) = mpsc::unbounded_channel::<()>();
    let recorder = Recorder::new(
        events,
        Reporter {
            controller: "sandbox-readiness-controller".into(),
            instance: settings.instance.clone(),
        },
    );
    let reporting = Reporting {
        triggers: trigger_tx,
        metrics: metrics.clone(),
        limits: settings.limits,
        transport: settings.transport,
        condition_type: settings.condition_type.clone(),
        gate: gate.clone(),
    };
    let ctx = Arc::new(Context::new(
        mgmt.clone(),
        recorder,
        settings,
        metrics.clone(),
        gate.clone(),
        Caches {
            machine_ar: machine_ar.clone(),
            deployment_ar: deployment_ar.clone(),
            cluster_ar: cluster_ar.clone(),
            machines: machines.clone(),
            deployments: deployments.clone(),
            clusters: clusters.clone(),
        },
        reporting,
    ));
    if let Some(l) = endpoints {
        let c = ctx.clone();
        http::serve(
            l,
            http::Endpoints {
                metrics: metrics.clone(),
                gauges: Arc::new(move || c.gauges()),
                stall_after: RESYNC * 3,
            },
        );
    }
    {
        // In a task of its own: it reads the TalosConfig CRD until it can
        // (CABPT installed after the controller, RBAC bound late, a 5xx),
        // and nothing else waits for it (pools read NotYetKnown meanwhile).
        let tx = all_tx.clone();
        let (c, mgmt) = (ctx.clone(), mgmt.clone());
        tokio::spawn(async move {
            let m = c.metrics.clone();
            c.desired
                .start(
                    &mgmt,
                    move || {
                        let _ = tx.send(());
                    },
                    move |why| m.set_desired_waiting(why),
                )
                .await;
        });
    }
    // /readyz and the first writes wait for the three caches' first lists.
    {
        let (m, d, c, metrics) = (
            machines.clone(),
            deployments.clone(),
            clusters.clone(),
            metrics.clone(),
        );
        tokio::spawn(async move {
            if listed(&m).await && listed(&d).await && listed(&c).await {
                tracing::info!(
                    machines = m.len(),
                    clusters = c.len(),
                    "management cluster read"
                );
                metrics.set_synced();
            }
        });
    }

    let deployment_changes = {
        let (machines, ar) = (machines.clone(), machine_ar.clone());
        (
            deployment_stream
                .inspect(log_failures("MachineDeployment"))
                .touched_objects(),
            move |d: DynamicObject| {
                let name = d.name_any();
                machines_where(&machines, &ar, &d.namespace().unwrap_or_default(), |m| {
                    m.labels().get(machine::DEPLOYMENT_LABEL) == Some(&name)
                })
            },
        )
    };
    let cluster_changes = {
        let (machines, ar, c) = (machines.clone(), machine_ar.clone(), ctx.clone());
        let mut log = log_failures("Cluster");
        (
            cluster_stream
                .inspect(move |ev| {
                    log(ev);
                    match ev {
                        Ok(watcher::Event::Delete(cl)) => c.forget_cluster(&key(cl)),
                        // A relist (after a 410, or a reconnect) sends no
                        // Delete for a Cluster deleted meanwhile: what it
                        // no longer lists is dropped here.
                        Ok(watcher::Event::InitDone) => c.forget_unlisted_clusters(),
                        _ => {}
                    }
                })
                .touched_objects(),
            move |cl: DynamicObject| {
                let name = cl.name_any();
                machines_where(&machines, &ar, &cl.namespace().unwrap_or_default(), |m| {
                    str_at(&m.data, "/spec/clusterName") == Some(&name)
                })
            },
        )
    };
    let node_changes = {
        let (machines, ar) = (machines.clone(), machine_ar.clone());
        stream::unfold(trigger_rx, |mut rx| async move {
            rx.recv().await.map(|t| (t, rx))
        })
        .flat_map(move |t| stream::iter(triggered(&machines, &ar, &t)))
    };
    // The proof pods no running proof owns are deleted 10 s after start
    // (a previous leader's) and then on each resync.
    {
        let c = ctx.clone();
        tokio::spawn(async move {
            let first = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut tick = tokio::time::interval_at(first, RESYNC);
            loop {
                tick.tick().await;
                crate::proof::sweep(&c).await;
            }
        });
    }
    // Each workload kubeconfig Secret is read again every --secret-resync
    // (the controller may only `get` it, never watch it): once per
    // cluster, not once per Machine.
    {
        let c = ctx.clone();
        tokio::spawn(async move {
            let period = c.settings.secret_resync.max(Duration::from_secs(1));
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tick.tick().await;
                c.maintain_workloads().await;
            }
        });
    }
    let every = {
        let c = ctx.clone();
        let mut ticks: u64 = 0;
        let resync = tokio_stream_interval(RESYNC).filter_map(move |()| {
            ticks += 1;
            c.metrics.alive();
            if ticks.is_multiple_of(PRUNE_TICKS) {
                c.prune();
            }
            std::future::ready(ticks.is_multiple_of(FULL_RESYNC_TICKS).then_some(()))
        });
        let opened = stream::unfold(gate, |g| async move {
            g.opened().await;
            Some(((), g))
        });
        let asked = stream::unfold(all_rx, |mut rx| async move {
            rx.recv().await.map(|()| ((), rx))
        });
        stream::select(resync, stream::select(opened, asked))
    };

    let controller = Controller::for_stream_with(
        machine_stream
            .inspect(log_failures("Machine"))
            .applied_objects(),
        machines,
        machine_ar.clone(),
    )
    .with_config(ControllerConfig::default().concurrency(CONCURRENCY))
    .watches_stream_with(deployment_changes.0, deployment_changes.1, deployment_ar)
    .watches_stream_with(cluster_changes.0, cluster_changes.1, cluster_ar)
    .reconcile_on(node_changes)
    .reconcile_all_on(every);
    tracing::info!(
        condition = %ctx.settings.condition_type,
        "mirroring Node conditions onto Machines"
    );
    controller
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                // A reconcile's own errors are logged by error_policy; what
                // reaches here is the queue's (an object gone meanwhile).
                tracing::debug!(error = %e, "reconcile queue");
            }
        })
        .await;
    Err(Error::WatchEnded("Machine"))
}

/// Whether `store` completed its first list (false: its writer is gone).
/// Polled again every 100 ms: kube-runtime's readiness signal wakes only
/// the last of several waiters, and the controller's own runner waits on
/// the Machines' store too.
async fn listed(store: &Store<DynamicObject>) -> bool {
    loop {
        if let Ok(r) =
            tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await
        {
            return r.is_ok();
        }
    }
}

/// A tick every `period`, the first after one period.
fn tokio_stream_interval(period: Duration) -> impl futures_util::Stream<Item = ()> {
    stream::unfold(
        tokio::time::interval_at(tokio::time::Instant::now() + period, period),
        |mut i| async move {
            i.tick().await;
            Some(((), i))
        },
    )
}
