//! The controller loop: reflectors on the management cluster's Machines,
//! MachineDeployments and Clusters; one [`Workload`] per Cluster; on every
//! change (and once a second, for staleness) each selected Machine's
//! condition is decided ([`condition::decide`]) and written if it changed
//! ([`patch::plan`]). I/O; the decisions are the pure modules'.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures_util::StreamExt;
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, Resource, ResourceExt,
};
use serde_json::Value;
use tokio::sync::Notify;

use crate::{
    condition::{self, Decision, NodeSeen, Status, Verdict},
    discovery, machine, node, patch,
    pool::{self, Pool},
    workload::{Lookup, Workload},
};

/// What the loop is told at start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub condition_type: String,
    pub stale_after: Duration,
    /// How often each workload kubeconfig Secret is re-read.
    pub secret_resync: Duration,
    /// Reporting instance of the Events (the pod's name in a cluster).
    pub instance: Option<String>,
}

/// How many 409s in a row one write survives before it waits for the
/// next round.
const MAX_CONFLICTS: usize = 5;

/// Every single request the loop makes waits at most this long: a hung
/// management API server must not stop the loop for kube's 295 s read
/// timeout (which is sized for watches).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `f` with [`CALL_TIMEOUT`]; a timeout reads as a service error.
pub async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service("no answer within 10 s".into())),
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(discovery::GROUP, discovery::VERSION, kind),
        plural,
    )
}

fn spawn_reflector(
    client: &Client,
    ar: &ApiResource,
    slim: fn(&mut DynamicObject),
    notify: Arc<Notify>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let kind = ar.kind.clone();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).modify(slim),
    )
    .default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => {
                    if failing {
                        tracing::info!(kind = %kind, "management cluster watch resumed");
                        failing = false;
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(kind = %kind, error = %e, "management cluster watch failed; retrying");
                        failing = true;
                    }
                }
            }
            notify.notify_one();
        }
    });
    store
}

/// Managed fields are never read here and are a large part of an object
/// as Cluster API's controllers leave it.
fn no_managed_fields(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
}

fn key(o: &DynamicObject) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

fn now_rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

struct Loop {
    mgmt: Client,
    s: Settings,
    machine_ar: ApiResource,
    machines: Store<DynamicObject>,
    deployments: Store<DynamicObject>,
    clusters: Store<DynamicObject>,
    workloads: HashMap<(String, String), Workload>,
    pools: pool::Cache,
    recorder: Recorder,
    /// ns/name → (resourceVersion the write replaced, the object it
    /// returned): until the watch delivers the write, the store's copy is
    /// older than what the controller knows and must not be planned on.
    written: HashMap<(String, String), (String, DynamicObject)>,
    started: SystemTime,
    notify: Arc<Notify>,
    /// Leader election's "may write" (controller-ops hook).
    gate: crate::leader::Gate,
}

/// Runs until the process is stopped. Errors only at start.
pub async fn run(mgmt: Client, s: Settings) -> Result<(), kube::Error> {
    run_gated(mgmt.clone(), mgmt, s, crate::leader::Gate::always()).await
}

/// [`run`], writing only while `gate` is open (leader election: the
/// standby keeps its caches warm and decides, but does not write).
/// Events go through `events`: a client of their own, behind a token
/// bucket of their own, as client-go's and controller-runtime's event
/// recorders have, so recording a transition never takes a request from
/// the condition writes (one Event per transition would otherwise make
/// every write wait for two tokens).
pub async fn run_gated(
    mgmt: Client,
    events: Client,
    s: Settings,
    gate: crate::leader::Gate,
) -> Result<(), kube::Error> {
    let notify = Arc::new(Notify::new());
    let machine_ar = resource("Machine", "machines");
    let machines = spawn_reflector(&mgmt, &machine_ar, machine::slim, notify.clone());
    let deployments = spawn_reflector(
        &mgmt,
        &resource("MachineDeployment", "machinedeployments"),
        no_managed_fields,
        notify.clone(),
    );
    let clusters = spawn_reflector(
        &mgmt,
        &resource("Cluster", "clusters"),
        no_managed_fields,
        notify.clone(),
    );
    for (what, st) in [
        ("Machines", &machines),
        ("MachineDeployments", &deployments),
        ("Clusters", &clusters),
    ] {
        if st.wait_until_ready().await.is_err() {
            tracing::error!("the {what} watch ended before its first list");
        }
    }
    crate::metrics::global().set_synced(); // controller-ops hook: /readyz
    tracing::info!(
        machines = machines.len(),
        clusters = clusters.len(),
        "management cluster read; mirroring {}",
        s.condition_type
    );
    let recorder = Recorder::new(
        events,
        Reporter {
            controller: "sandbox-readiness-controller".into(),
            instance: s.instance.clone(),
        },
    );
    let mut l = Loop {
        mgmt,
        s,
        machine_ar,
        machines,
        deployments,
        clusters,
        workloads: HashMap::new(),
        pools: pool::Cache::default(),
        recorder,
        written: HashMap::new(),
        started: SystemTime::now(),
        notify: notify.clone(),
        gate,
    };
    loop {
        l.round().await;
        // Changes arrive through `notify`; the tick catches heartbeats
        // growing stale and outages passing --stale-after.
        tokio::select! {
            () = notify.notified() => {
                // Let a burst of watch events land before the next round.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

impl Loop {
    async fn round(&mut self) {
        // controller-ops hook: the round's metrics.
        let round_started = std::time::Instant::now();
        let mut watched: Vec<(String, Option<String>)> = Vec::new();
        // Workload clusters: one per Cluster, dropped with it.
        let clusters: HashSet<(String, String)> =
            self.clusters.state().iter().map(|c| key(c)).collect();
        self.workloads.retain(|k, _| {
            let keep = clusters.contains(k);
            if !keep {
                tracing::info!(cluster = %format!("{}/{}", k.0, k.1), "Cluster deleted; its workload client is dropped");
            }
            keep
        });
        for k in &clusters {
            let w = self
                .workloads
                .entry(k.clone())
                .or_insert_with(|| Workload::new(&k.0, &k.1));
            w.maintain(&self.mgmt, self.s.secret_resync, &self.notify)
                .await;
        }
        let mirrored: HashSet<(String, String)> = self
            .deployments
            .state()
            .iter()
            .filter(|d| machine::mirrored(&serde_json::to_value(d.as_ref()).unwrap_or(Value::Null)))
            .map(|d| key(d))
            .collect();
        let mut boot_secrets = HashSet::new();
        let mut present = HashSet::new();
        for m in self.machines.state() {
            let k = key(&m);
            present.insert(k.clone());
            let current = match self.written.get(&k) {
                Some((before, after))
                    if m.resource_version().as_deref() == Some(before.as_str()) =>
                {
                    after.clone()
                }
                _ => {
                    self.written.remove(&k);
                    m.as_ref().clone()
                }
            };
            let whole = serde_json::to_value(&current).unwrap_or(Value::Null);
            let v = machine::view(&whole, &self.s.condition_type);
            if !machine::selected(&v, |d| mirrored.contains(&(k.0.clone(), d.to_string()))) {
                continue;
            }
            watched.push((
                format!("{}/{}", k.0, v.cluster.unwrap_or("")),
                crate::metrics::status_of(&whole, &self.s.condition_type),
            ));
            if let Some(b) = v.bootstrap_secret {
                boot_secrets.insert((k.0.clone(), b.to_string()));
            }
            if current.metadata.deletion_timestamp.is_some() {
                // A Machine going away is Cluster API's; nothing to hold.
                continue;
            }
            let seen = self.seen(&k.0, &v).await;
            let conds = conditions(&whole);
            let has = patch::existing(&conds, &self.s.condition_type).is_some();
            match condition::decide(&seen, has, SystemTime::now(), self.s.stale_after) {
                Decision::Keep => {}
                Decision::Write(verdict) => self.write(&k, current, &verdict).await,
            }
        }
        self.written.retain(|k, _| present.contains(k));
        self.pools
            .retain(|ns, n| boot_secrets.contains(&(ns.to_string(), n.to_string())));
        crate::metrics::global().round(&watched, round_started.elapsed());
    }

    async fn seen(&mut self, ns: &str, v: &machine::MachineView<'_>) -> NodeSeen {
        let Some(node_name) = v.node else {
            return NodeSeen::NoNodeRef;
        };
        let Some(cluster) = v.cluster else {
            return NodeSeen::NotRead {
                since: self.started,
                why: "the Machine names no cluster (spec.clusterName)".into(),
                pending: false,
            };
        };
        let Some(w) = self.workloads.get(&(ns.to_string(), cluster.to_string())) else {
            return NodeSeen::NotRead {
                since: self.started,
                why: format!("Cluster {ns}/{cluster} does not exist"),
                pending: false,
            };
        };
        let n = match w.lookup(node_name) {
            Lookup::NotRead {
                since,
                why,
                pending,
            } => {
                return NodeSeen::NotRead {
                    since,
                    why,
                    pending,
                }
            }
            Lookup::NoNode => {
                return NodeSeen::NoNode {
                    node: node_name.into(),
                }
            }
            Lookup::Node(n) => n,
        };
        let reading = node::reading(&n, &self.s.condition_type);
        // The pool is read only when it matters: the Node says True.
        let says_true = reading
            .condition
            .as_ref()
            .is_some_and(|c| c.status == Status::True);
        let pool = match v.bootstrap_secret {
            _ if !says_true => Pool::Own,
            Some(secret) => self.pools.get(&self.mgmt, ns, secret).await,
            None => Pool::Unreadable(
                "the Machine names no bootstrap data Secret (spec.bootstrap.dataSecretName)".into(),
            ),
        };
        NodeSeen::Node {
            node: node_name.into(),
            reading,
            pool,
        }
    }

    /// Writes `verdict` onto the Machine unless it already says it;
    /// re-reads and plans again on 409, so a concurrent write by Cluster
    /// API is never overwritten.
    async fn write(&mut self, k: &(String, String), mut current: DynamicObject, verdict: &Verdict) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.mgmt.clone(), &k.0, &self.machine_ar);
        let machine = format!("{}/{}", k.0, k.1);
        for _ in 0..MAX_CONFLICTS {
            let whole = serde_json::to_value(&current).unwrap_or(Value::Null);
            let conds = conditions(&whole);
            let now = now_rfc3339(SystemTime::now());
            let Some(plan) = patch::plan(
                &conds,
                &self.s.condition_type,
                verdict,
                current.metadata.generation,
                &now,
            ) else {
                return;
            };
            let Some(rv) = current.resource_version() else {
                tracing::warn!(machine = %machine, "the Machine has no resourceVersion; not written");
                return;
            };
            let body = patch::body(&rv, &plan.conditions);
            // Leader election: asked right before each write, so a leader
            // that lost its Lease stops at once (controller-ops hook).
            if !self.gate.may_write() {
                return;
            }
            match timed(api.patch_status(&k.1, &PatchParams::default(), &Patch::Merge(&body))).await
            {
                Ok(mut after) => {
                    machine::slim(&mut after);
                    crate::metrics::global().write_ok();
                    tracing::info!(
                        machine = %machine,
                        status = verdict.status.as_str(),
                        reason = %verdict.reason,
                        "condition written"
                    );
                    if let Some((ty, reason)) = patch::event_for(plan.from, plan.to) {
                        self.event(&after, ty, reason, &verdict.message).await;
                    }
                    self.written.insert(k.clone(), (rv, after));
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    crate::metrics::global().conflict();
                    tracing::debug!(machine = %machine, "409: the Machine changed since it was read; reading it again");
                    match timed(api.get_status(&k.1)).await {
                        Ok(fresh) => current = fresh,
                        Err(e) => {
                            tracing::warn!(machine = %machine, error = %e, "re-reading the Machine failed");
                            return;
                        }
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    crate::metrics::global().write_failed();
                    tracing::warn!(machine = %machine, error = %e, "writing the condition failed; retrying next round");
                    return;
                }
            }
        }
        tracing::warn!(machine = %machine, "the Machine kept changing under {MAX_CONFLICTS} writes; retrying next round");
    }

    async fn event(&self, m: &DynamicObject, ty: &str, reason: &str, note: &str) {
        let ev = Event {
            type_: if ty == "Normal" {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: reason.into(),
            note: Some(condition::bound(note.to_string())),
            action: "MirrorNodeCondition".into(),
            secondary: None,
        };
        let r = m.object_ref(&self.machine_ar);
        match timed(self.recorder.publish(&ev, &r)).await {
            Ok(()) => crate::metrics::global().event(),
            Err(e) => {
                tracing::warn!(machine = %m.name_any(), error = %e, "recording an Event failed")
            }
        }
    }
}

fn conditions(whole: &Value) -> Vec<Value> {
    whole
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}
