//! What every reconcile is given ([`Context`]): the management client and
//! the Event recorder, the settings, the metrics, the leader gate, the
//! caches of Machines, MachineDeployments and Clusters, the desired-state
//! cache and one connection per workload cluster. No globals: the binary
//! builds one Context, the tests and benches as many as they like.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use kube::{
    api::{ApiResource, DynamicObject},
    runtime::{events::Recorder, reflector::ObjectRef, reflector::Store},
    Client, ResourceExt,
};
use serde_json::Value;

use crate::{
    desired::Desired,
    kubeconfig,
    leader::Gate,
    machine,
    metrics::{Gauges, Metrics},
    qps,
    workload::{Reporting, Workload},
};

/// What the controller is told at start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub condition_type: String,
    pub stale_after: Duration,
    /// How often each workload kubeconfig Secret is re-read.
    pub secret_resync: Duration,
    /// Reporting instance of the Events (the pod's name in a cluster).
    pub instance: Option<String>,
    /// What the operator allows of workload kubeconfigs' transport.
    pub transport: kubeconfig::Transport,
    /// Each API server's client-side request limit.
    pub limits: qps::Limits,
}

/// The namespace/name of an object.
pub type Key = (String, String);

pub fn key(o: &DynamicObject) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

pub struct Context {
    pub mgmt: Client,
    pub recorder: Recorder,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub gate: Gate,
    pub machine_ar: ApiResource,
    pub deployment_ar: ApiResource,
    pub cluster_ar: ApiResource,
    pub machines: Store<DynamicObject>,
    pub deployments: Store<DynamicObject>,
    pub clusters: Store<DynamicObject>,
    pub desired: Desired,
    pub reporting: Reporting,
    /// When this controller started (an unread workload is unread since).
    pub started: SystemTime,
    workloads: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Workload>>>>,
    /// Machine → (resourceVersion the write replaced, the object it
    /// returned): until the watch delivers the write, the cache's copy is
    /// older than what the controller knows and must not be planned on.
    written: Mutex<HashMap<Key, (String, DynamicObject)>>,
    /// Failed reconciles in a row, per Machine: the retry's backoff.
    failures: Mutex<HashMap<Key, u32>>,
    /// The pod proofs running or recently settled, per Machine.
    pub proofs: crate::proof::Proofs,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Caches {
    pub machine_ar: ApiResource,
    pub deployment_ar: ApiResource,
    pub cluster_ar: ApiResource,
    pub machines: Store<DynamicObject>,
    pub deployments: Store<DynamicObject>,
    pub clusters: Store<DynamicObject>,
}

impl Context {
    pub fn new(
        mgmt: Client,
        recorder: Recorder,
        settings: Settings,
        metrics: Arc<Metrics>,
        gate: Gate,
        caches: Caches,
        reporting: Reporting,
    ) -> Context {
        Context {
            mgmt,
            recorder,
            settings,
            metrics,
            gate,
            machine_ar: caches.machine_ar,
            deployment_ar: caches.deployment_ar,
            cluster_ar: caches.cluster_ar,
            machines: caches.machines,
            deployments: caches.deployments,
            clusters: caches.clusters,
            desired: Desired::default(),
            reporting,
            started: SystemTime::now(),
            workloads: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            proofs: crate::proof::Proofs::default(),
        }
    }

    /// The connection to workload cluster `namespace/cluster`, made on
    /// first use.
    pub fn workload(&self, namespace: &str, cluster: &str) -> Arc<tokio::sync::Mutex<Workload>> {
        lock(&self.workloads)
            .entry((namespace.to_string(), cluster.to_string()))
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Workload::new(namespace, cluster))))
            .clone()
    }

    /// Counts a Machine's failed reconciles in a row (`failed`), or resets
    /// the count after one that succeeded; the count after.
    pub fn failed(&self, k: &Key, failed: bool) -> u32 {
        let mut f = lock(&self.failures);
        if failed {
            let n = f.entry(k.clone()).or_default();
            *n = n.saturating_add(1);
            *n
        } else {
            f.remove(k);
            0
        }
    }

    /// Drops the connection (its Node watch and cache) to workload cluster
    /// `k`, saying `why` when there was one.
    fn drop_workload(&self, k: &Key, why: &str) {
        if lock(&self.workloads).remove(k).is_some() {
            tracing::info!(cluster = %format!("{}/{}", k.0, k.1), "{why}; its workload client is dropped");
        }
    }

    /// Every workload connection, as one snapshot of the map (each then
    /// locked on its own, never under the map's lock).
    fn connections(&self) -> Vec<(Key, Arc<tokio::sync::Mutex<Workload>>)> {
        lock(&self.workloads)
            .iter()
            .map(|(k, w)| (k.clone(), w.clone()))
            .collect()
    }

    /// Drops the connection of a deleted Cluster.
    pub fn forget_cluster(&self, k: &Key) {
        self.drop_workload(k, "Cluster deleted");
    }

    /// Drops the connections of Clusters the Cluster cache no longer holds
    /// (after a relist, which reports no deletion).
    pub fn forget_unlisted_clusters(&self) {
        for (k, _) in self.connections() {
            if self.cluster(&k.0, &k.1).is_none() {
                self.drop_workload(
                    &k,
                    "Cluster not listed again (deleted while the watch was down)",
                );
            }
        }
    }

    /// The Machine to plan on: the one the last write returned while the
    /// cache still has the version that write replaced.
    pub fn current(&self, k: &Key, cached: &DynamicObject) -> DynamicObject {
        let mut w = lock(&self.written);
        match w.get(k) {
            Some((before, after))
                if cached.resource_version().as_deref() == Some(before.as_str()) =>
            {
                after.clone()
            }
            Some(_) => {
                w.remove(k);
                cached.clone()
            }
            None => cached.clone(),
        }
    }

    pub fn wrote(&self, k: Key, replaced_rv: String, after: DynamicObject) {
        lock(&self.written).insert(k, (replaced_rv, after));
    }

    /// Forgets what belongs to Machines no longer cached (their written
    /// copies, their failure counts) and the workload clients no selected
    /// Machine needs. On the resync tick.
    pub fn prune(&self) {
        let machines = self.machines.state();
        let present: HashSet<Key> = machines.iter().map(|m| key(m)).collect();
        lock(&self.written).retain(|k, _| present.contains(k));
        lock(&self.failures).retain(|k, _| present.contains(k));
        self.proofs.retain(|k| present.contains(k));
        // Workload connections (their Node watch and cache) and their
        // metric labels live only while a selected Machine of an existing
        // Cluster needs them: a Cluster deleted during a relist (which sends
        // no Delete event) or a pool deselected (a rotated credential would
        // otherwise be retried for ever) is dropped here.
        // A standby holds no workload connection: it writes nothing, and a
        // second watch on every tenant's API server would buy only the one
        // list per cluster a new leader makes (Machines keep their
        // conditions meanwhile).
        let standby = self.gate.elected() && !self.gate.may_write();
        let mut nodes: HashMap<Key, HashSet<String>> = HashMap::new();
        if !standby {
            for m in machines.iter() {
                if let Some((k, node)) = self.needs(m) {
                    let names = nodes.entry(k).or_default();
                    names.extend(node);
                }
            }
        }
        let needed: HashSet<Key> = nodes.keys().cloned().collect();
        // Each cluster a selected Machine needs keeps only the Nodes those
        // Machines name (one busy with a reconcile is pruned at the next
        // tick); the others are dropped.
        for (k, w) in self.connections() {
            match nodes.get(&k) {
                Some(names) => {
                    if let Ok(w) = w.try_lock() {
                        w.retain_nodes(names);
                    }
                }
                None if standby => self.drop_workload(&k, "not the leader"),
                None if self.cluster(&k.0, &k.1).is_none() => {
                    self.drop_workload(&k, "Cluster deleted")
                }
                None => self.drop_workload(&k, "no selected Machine needs this workload cluster"),
            }
        }
        let labels: HashSet<String> = needed.iter().map(|(n, c)| format!("{n}/{c}")).collect();
        self.metrics.retain_workload_errors(|c| labels.contains(c));
    }

    /// The workload cluster a selected Machine of an existing Cluster
    /// needs, and the Node it names there (if it names one yet).
    fn needs(&self, m: &DynamicObject) -> Option<(Key, Option<String>)> {
        let ns = m.namespace()?;
        let whole = serde_json::to_value(m).ok()?;
        let v = machine::view(&whole, &self.settings.condition_type);
        let cluster = v.cluster?;
        if !machine::selected(&v, |d| self.deployment_mirrored(&ns, d))
            || self.cluster(&ns, cluster).is_none()
        {
            return None;
        }
        Some(((ns, cluster.to_string()), v.node.map(str::to_string)))
    }

    /// The Node names workload cluster `namespace/cluster`'s selected
    /// Machines give now: what a new connection's first list keeps.
    pub fn expected_nodes(&self, namespace: &str, cluster: &str) -> HashSet<String> {
        // The cheap test first: only this cluster's Machines are read whole.
        let of_cluster = |m: &DynamicObject| {
            m.metadata.namespace.as_deref() == Some(namespace)
                && m.data.pointer("/spec/clusterName").and_then(Value::as_str) == Some(cluster)
        };
        self.machines
            .state()
            .iter()
            .filter(|m| of_cluster(m))
            .filter_map(|m| self.needs(m)?.1)
            .collect()
    }

    /// The MachineDeployment `namespace/name` as cached (one lookup by key).
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.deployments
            .get(&ObjectRef::new_with(name, self.deployment_ar.clone()).within(namespace))
    }

    /// Reads each workload cluster's kubeconfig Secret again when due (and
    /// reconnects when it changed).
    pub async fn maintain_workloads(&self) {
        for ((ns, cluster), w) in self.connections() {
            w.lock()
                .await
                .maintain(
                    &self.mgmt,
                    self.settings.secret_resync,
                    &self.reporting,
                    || self.expected_nodes(&ns, &cluster),
                )
                .await;
        }
    }

    /// The clients of the workload clusters connected now.
    pub async fn workload_clients(&self) -> Vec<(Key, Client)> {
        let mut out = Vec::new();
        for (k, w) in self.connections() {
            if let Some(c) = w.lock().await.client() {
                out.push((k, c));
            }
        }
        out
    }

    /// Whether Machine deployment `namespace/name` asks to be mirrored.
    pub fn deployment_mirrored(&self, namespace: &str, name: &str) -> bool {
        // One lookup by key (the reflector's map), not a walk of the cache:
        // this runs for every Machine on every pass.
        self.deployments
            .get(&ObjectRef::new_with(name, self.deployment_ar.clone()).within(namespace))
            .is_some_and(|d| machine::mirrored(&d))
    }

    /// The Cluster `namespace/name` as cached (one lookup by key).
    pub fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.clusters
            .get(&ObjectRef::new_with(name, self.cluster_ar.clone()).within(namespace))
    }

    /// The gauges of the moment, from the Machine cache.
    pub fn gauges(&self) -> Gauges {
        let ty = &self.settings.condition_type;
        let mirrored: HashSet<Key> = self
            .deployments
            .state()
            .iter()
            .filter(|d| machine::mirrored(d))
            .map(|d| key(d))
            .collect();
        let paused_clusters: HashSet<Key> = self
            .clusters
            .state()
            .iter()
            .filter(|c| {
                machine::cluster_paused(&serde_json::to_value(c.as_ref()).unwrap_or(Value::Null))
            })
            .map(|c| key(c))
            .collect();
        let mut g = Gauges::default();
        for s in ["True", "False", "Unknown"] {
            g.conditions.insert(s.to_string(), 0);
        }
        for m in self.machines.state() {
            let ns = m.namespace().unwrap_or_default();
            let whole = serde_json::to_value(m.as_ref()).unwrap_or(Value::Null);
            let v = machine::view(&whole, ty);
            if !machine::selected(&v, |d| mirrored.contains(&(ns.clone(), d.to_string()))) {
                continue;
            }
            let cluster = v.cluster.unwrap_or("");
            *g.machines.entry(format!("{ns}/{cluster}")).or_default() += 1;
            let s = crate::metrics::status_of(&whole, ty).unwrap_or_else(|| "none".into());
            *g.conditions.entry(s).or_default() += 1;
            if v.gate == machine::Gate::Negative {
                g.negative_gates += 1;
            }
            if v.paused || paused_clusters.contains(&(ns, cluster.to_string())) {
                g.paused += 1;
            }
        }
        g
    }
}
