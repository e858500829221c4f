//! One connection per workload cluster, the way Cluster API reaches its
//! nodes: the kubeconfig in the management cluster's `<cluster>-kubeconfig`
//! Secret, a reflector on the cluster's Nodes. I/O.
//!
//! The Secret is only ever `get` (the controller's RBAC grants no list or
//! watch on Secrets): it is re-read every `secret_resync`, at once after a
//! 401 or a TLS failure (control planes rotate it), and the connection is
//! rebuilt when its resourceVersion changes. A workload outage leaves the
//! reflector's store as it was (kube-runtime's watcher keeps it until its
//! next complete list), so the last Node conditions are still read.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeStatus, Secret};
use kube::{
    config::KubeConfigOptions,
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, Config,
};
use tokio::{sync::Notify, task::JoinHandle};

use sandbox_readiness::desired::annotation::ANNOTATION;

use crate::kubeconfig;

/// What the controller knows of a workload cluster's reachability.
#[derive(Debug, Clone)]
pub struct Health {
    /// The Node reflector completed a list at least once on this connection.
    pub synced: bool,
    /// Since when the cluster could not be read (or this connection started).
    pub unread_since: SystemTime,
    /// The last error, one line, no secret.
    pub error: Option<String>,
    /// A 401 or TLS failure asks for the Secret to be read again.
    pub reread: bool,
}

struct Conn {
    store: Store<Node>,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One workload cluster.
pub struct Workload {
    pub namespace: String,
    pub cluster: String,
    secret_rv: Option<String>,
    conn: Option<Conn>,
    health: Arc<Mutex<Health>>,
    last_secret_read: Option<Instant>,
    /// Why there is no connection (the Secret is missing, refused…).
    refused: Option<String>,
}

/// A Machine's Node as far as the workload cluster can tell.
pub enum Lookup {
    /// Not read: why, and since when; `pending`: the first list on a new
    /// connection is under way and nothing has failed yet.
    NotRead {
        since: SystemTime,
        why: String,
        pending: bool,
    },
    NoNode,
    Node(Arc<Node>),
}

fn lock(h: &Mutex<Health>) -> std::sync::MutexGuard<'_, Health> {
    // A panic while holding this lock leaves plain data; go on with it.
    h.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A 401, or a TLS failure (the CA or the client certificate rotated).
/// What the cache keeps of a Node: what the reader
/// ([`sandbox_readiness::nodestatus::read::read`]) takes — its identity,
/// the desired-state annotation and its conditions. The rest of a
/// kubelet-written Node (images, volumes, capacity, addresses, nodeInfo,
/// labels, managed fields) is most of its size and is dropped before the
/// reflector stores it, so the controller's memory follows the number of
/// Nodes, not what they run.
fn slim(n: &mut Node) {
    let md = &mut n.metadata;
    md.managed_fields = None;
    md.labels = None;
    md.owner_references = None;
    md.finalizers = None;
    if let Some(a) = md.annotations.as_mut() {
        a.retain(|k, _| k == ANNOTATION);
    }
    n.spec = None;
    n.status = n.status.take().map(|s| NodeStatus {
        conditions: s.conditions,
        ..NodeStatus::default()
    });
}

fn needs_reread(e: &watcher::Error) -> bool {
    let inner = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(s) => return s.code == 401,
        watcher::Error::NoResourceVersion => return false,
    };
    if let kube::Error::Api(s) = inner {
        return s.code == 401;
    }
    let text = format!("{inner:?}").to_ascii_lowercase();
    text.contains("tls") || text.contains("certificate") || text.contains("handshake")
}

/// One line for a watch error, without the server's URL query (harmless)
/// and never any credential (kube's errors carry none).
fn describe(e: &watcher::Error) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or("").chars().take(300).collect()
}

impl Workload {
    pub fn new(namespace: &str, cluster: &str) -> Self {
        Workload {
            namespace: namespace.into(),
            cluster: cluster.into(),
            secret_rv: None,
            conn: None,
            health: Arc::new(Mutex::new(Health {
                synced: false,
                unread_since: SystemTime::now(),
                error: Some("not connected yet".into()),
                reread: false,
            })),
            last_secret_read: None,
            refused: None,
        }
    }

    pub fn secret_name(&self) -> String {
        format!("{}-kubeconfig", self.cluster)
    }

    /// Reads the Secret when due and (re)connects when it changed.
    pub async fn maintain(&mut self, mgmt: &Client, resync: Duration, notify: &Arc<Notify>) {
        let due = {
            let h = lock(&self.health);
            h.reread || self.last_secret_read.is_none_or(|t| t.elapsed() >= resync)
        };
        if !due {
            return;
        }
        // A 401 storm must not become a Secret-read storm.
        if self
            .last_secret_read
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_secret_read = Some(Instant::now());
        lock(&self.health).reread = false;
        let name = self.secret_name();
        let full = format!("{}/{}", self.namespace, name);
        let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), &self.namespace);
        let secret = match crate::run::timed(secrets.get_opt(&name)).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                self.drop_conn(format!("Secret {full} does not exist"));
                return;
            }
            Err(e) => {
                // The management API is having trouble: keep what we have.
                tracing::warn!(secret = %full, error = %e, "reading the workload kubeconfig failed");
                return;
            }
        };
        let rv = secret.metadata.resource_version.clone();
        if rv.is_some() && rv == self.secret_rv && (self.conn.is_some() || self.refused.is_some()) {
            return;
        }
        self.secret_rv = rv;
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(kubeconfig::SECRET_KEY))
            .map(|b| b.0.as_slice());
        let kc = match kubeconfig::parse(&full, value) {
            Ok(kc) => kc,
            Err(e) => {
                tracing::error!("{e}");
                self.drop_conn(e.to_string());
                return;
            }
        };
        let config = match Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await {
            Ok(c) => c,
            Err(_) => {
                // kube's error could describe the credential; say only where.
                let why = format!(
                    "Secret {full}: the kubeconfig's server or credentials cannot be loaded"
                );
                tracing::error!("{why}");
                self.drop_conn(why);
                return;
            }
        };
        let client = match crate::qps::client(config) {
            // controller-ops: QPS limit
            Ok(c) => c,
            Err(_) => {
                let why = format!("Secret {full}: no client can be built from the kubeconfig");
                tracing::error!("{why}");
                self.drop_conn(why);
                return;
            }
        };
        tracing::info!(cluster = %format!("{}/{}", self.namespace, self.cluster), "connecting to the workload cluster");
        self.refused = None;
        self.connect(client, notify.clone());
    }

    fn drop_conn(&mut self, why: String) {
        if self.conn.take().is_some() || self.refused.as_deref() != Some(why.as_str()) {
            let mut h = lock(&self.health);
            if h.synced {
                h.unread_since = SystemTime::now();
            }
            h.synced = false;
            h.error = Some(why.clone());
        }
        self.refused = Some(why);
    }

    fn connect(&mut self, client: Client, notify: Arc<Notify>) {
        let (store, writer) = reflector::store::<Node>();
        let api: Api<Node> = Api::all(client);
        let health = {
            // A new connection starts unsynced; the time the cluster was
            // last read stays (the old store is gone with the old connection).
            let mut h = lock(&self.health);
            if h.synced {
                h.unread_since = SystemTime::now();
            }
            h.synced = false;
            // Nothing has failed on this connection yet.
            h.error = None;
            self.health.clone()
        };
        let cluster = format!("{}/{}", self.namespace, self.cluster);
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).modify(slim),
        )
        .default_backoff();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => {
                        let mut h = lock(&health);
                        if !h.synced || h.error.is_some() {
                            tracing::info!(cluster = %cluster, "workload cluster's Nodes read");
                        }
                        h.synced = true;
                        h.error = None;
                    }
                    Ok(_) => {
                        let mut h = lock(&health);
                        if h.error.take().is_some() {
                            tracing::info!(cluster = %cluster, "workload cluster reachable again");
                        }
                    }
                    Err(e) => {
                        crate::metrics::global().workload_error(&cluster); // controller-ops hook
                        let line = describe(&e);
                        let mut h = lock(&health);
                        if h.error.is_none() {
                            tracing::warn!(cluster = %cluster, error = %line, "workload cluster unreachable");
                            if !h.synced {
                                h.unread_since = SystemTime::now();
                            }
                        }
                        h.error = Some(line);
                        h.reread |= needs_reread(&e);
                    }
                }
                notify.notify_one();
            }
        });
        self.conn = Some(Conn { store, task });
    }

    /// The Node `name` as last read.
    pub fn lookup(&self, name: &str) -> Lookup {
        let h = lock(&self.health).clone();
        match &self.conn {
            Some(c) if h.synced => match c.store.get(&ObjectRef::new(name)) {
                Some(n) => Lookup::Node(n),
                None => Lookup::NoNode,
            },
            _ => Lookup::NotRead {
                since: h.unread_since,
                pending: self.conn.is_some() && self.refused.is_none() && h.error.is_none(),
                why: self
                    .refused
                    .clone()
                    .or(h.error)
                    .unwrap_or_else(|| "the Node list has not completed yet".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TY: &str = "sandbox-readiness.io/SandboxReady";

    #[test]
    fn a_slim_node_reads_as_the_whole_one() {
        let full = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "w1", "uid": "u1", "resourceVersion": "9",
                "labels": {"kubernetes.io/hostname": "w1"},
                "annotations": {ANNOTATION: r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"}}"#,
                    "talos.dev/owned-labels": "[]"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDRs": ["10.244.0.0/24"]},
            "status": {"conditions": [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-02T00:00:00Z"},
                    {"type": TY, "status": "True", "reason": "Converged", "message": "",
                        "lastHeartbeatTime": "2026-12-02T00:00:00Z", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}],
                "nodeInfo": {"bootID": "b1", "machineID": "m", "systemUUID": "s", "kernelVersion": "6.12",
                    "osImage": "Talos", "containerRuntimeVersion": "containerd://2.1", "kubeletVersion": "v1.33",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}});
        let whole: Node = serde_json::from_value(full).unwrap();
        let mut slimmed = whole.clone();
        slim(&mut slimmed);
        assert_eq!(
            crate::node::reading(&slimmed, TY),
            crate::node::reading(&whole, TY)
        );
        assert!(crate::node::reading(&slimmed, TY).desired.is_some());
        let v = serde_json::to_value(&slimmed).unwrap();
        assert_eq!(
            v["metadata"]["annotations"].as_object().map(|a| a.len()),
            Some(1)
        );
        for gone in [
            "/spec",
            "/status/images",
            "/status/nodeInfo",
            "/status/addresses",
            "/metadata/labels",
        ] {
            assert!(v.pointer(gone).is_none(), "{gone} kept");
        }
    }
}
