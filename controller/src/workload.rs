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
//!
//! Everything a workload cluster sends is a tenant's: its errors become a
//! fixed phrase with a short cleaned text; of its Nodes only those a
//! selected Machine names are kept ([`crate::nodecache`]), each cut to our
//! one condition (message capped), the desired state parsed (never its
//! text) and the bootIDs; Nodes are listed in pages so a cluster of Nodes
//! at the API server's 256 KiB annotation limit is never held in memory at
//! once. Changes of kept Nodes reach the controller as [`Trigger`]s, which
//! it maps to the Machines they concern; a Node nobody asked for triggers
//! nothing.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo, Secret};
use kube::{
    config::KubeConfigOptions,
    runtime::{
        utils::ResetTimerBackoff,
        watcher::{self, watcher, ExponentialBackoff},
        WatchStreamExt,
    },
    Api, Client, Config,
};
use tokio::{
    sync::{mpsc::UnboundedSender, Semaphore},
    task::JoinHandle,
};

use sandbox_readiness::{
    desired::annotation::{ANNOTATION, MAX_ANNOTATION_BYTES},
    nodestatus::VERDICT_BOOT_ANNOTATION,
    text::clean_capped,
};

use crate::{
    kubeconfig,
    metrics::Metrics,
    nodecache::{Found, Kept, NodeCache, FETCH_RETRY, MAX_NODES_PER_CLUSTER},
    qps,
};

/// What changed in a workload cluster, for the Machines it backs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// Node `node` of cluster `namespace/cluster` changed or went away.
    Node {
        namespace: String,
        cluster: String,
        node: String,
    },
    /// The cluster's reachability changed (listed, failing, refused): every
    /// Machine of the cluster.
    Cluster { namespace: String, cluster: String },
}

/// Nodes per page of a workload list: at the API server's 256 KiB
/// annotation limit, a page is at most about 2.5 MiB before [`slim`].
const NODE_PAGE: u32 = 10;

/// Marks a Node whose desired-state annotation was larger than the reader
/// accepts: the annotation itself is not kept.
const OVERSIZED: &str = "sandbox-readiness.io/desired-oversized";

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
    cache: Arc<Mutex<NodeCache>>,
    triggers: UnboundedSender<Trigger>,
    /// The Node GETs out at once ([`FETCHES_AT_ONCE`]).
    fetches: Arc<Semaphore>,
    /// The connection's client: the proof ([`crate::proof`]) creates and
    /// reads its pods with it.
    client: Client,
    task: JoinHandle<()>,
}

/// What a workload connection is given to report with.
#[derive(Clone)]
pub struct Reporting {
    pub triggers: UnboundedSender<Trigger>,
    pub metrics: Arc<Metrics>,
    pub limits: qps::Limits,
    pub transport: kubeconfig::Transport,
    /// The condition type kept of each Node.
    pub condition_type: String,
    /// The leader gate: a workload client's writes (the proof's pods) are
    /// sent only while it is open.
    pub gate: crate::leader::Gate,
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
    /// `refused` is the kubeconfig's own refusal (its transport or its
    /// credentials), not a missing Secret.
    refused_config: bool,
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
    /// The kubeconfig is refused: no request is made.
    Refused(String),
    NoNode,
    /// The cluster's cache holds this many Node names already
    /// ([`crate::nodecache::MAX_NODES_PER_CLUSTER`]).
    TooMany(usize),
    Node(Arc<Kept>),
}

fn lock<T>(h: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock leaves plain data; go on with it.
    h.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the cache keeps of a Node: what the reader
/// ([`sandbox_readiness::nodestatus::read::read`]) takes — its identity,
/// the desired-state and verdict-boot annotations and its conditions — its
/// providerID and bootID. The rest of a
/// kubelet-written Node (images, volumes, capacity, addresses, nodeInfo,
/// labels, managed fields) is most of its size and is dropped before the
/// reflector stores it, so the controller's memory follows the number of
/// Nodes, not what they run.
fn slim(n: &mut Node, condition_type: &str) {
    let md = &mut n.metadata;
    md.managed_fields = None;
    md.labels = None;
    md.owner_references = None;
    md.finalizers = None;
    if let Some(a) = md.annotations.as_mut() {
        a.retain(|k, _| k == ANNOTATION || k == VERDICT_BOOT_ANNOTATION);
        if a.get(ANNOTATION)
            .is_some_and(|v| v.len() > MAX_ANNOTATION_BYTES)
        {
            let len = a.remove(ANNOTATION).map(|v| v.len()).unwrap_or_default();
            a.insert(OVERSIZED.into(), len.to_string());
        }
    }
    // Only its providerID: the Machine's must match it (one incarnation).
    n.spec =
        n.spec
            .take()
            .and_then(|s| s.provider_id)
            .map(|p| k8s_openapi::api::core::v1::NodeSpec {
                provider_id: Some(clean_capped(&p, 512)),
                ..Default::default()
            });
    n.status = n.status.take().map(|s| NodeStatus {
        // Its bootID only: a proof holds for one boot (crate::proof).
        node_info: s.node_info.map(|i| NodeSystemInfo {
            boot_id: clean_capped(&i.boot_id, 64),
            ..NodeSystemInfo::default()
        }),
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == condition_type)
                .take(1)
                .map(|mut c| {
                    c.message = c
                        .message
                        .map(|m| clean_capped(&m, crate::condition::MAX_MESSAGE));
                    c
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
}

/// Every watch's reconnect delays, the workload clusters' and the
/// management cluster's: kube-runtime's default (from 0.8 s doubling,
/// jittered, reset after 2 min of health) but capped at 5 s before the
/// jitter, which adds up to as much again (backon's `with_jitter`; a 10 s
/// cap measured 14 s between attempts) — so a server back from an outage
/// is read again within 10 s, and the Machines (and a rollout waiting on
/// them) follow. The default's 30 s cap left a Machine created just after
/// a management server restart unseen for up to half a minute. An attempt
/// on a server that is down is one refused connect.
pub(crate) fn reconnect_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(800))
                .with_max_delay(Duration::from_secs(5))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(120),
    )
}

/// The Node's reading; an annotation dropped for its size before caching
/// reads as unreadable (not as missing: the agent did write one).
pub fn reading(n: &Node, condition_type: &str) -> sandbox_readiness::nodestatus::read::Reading {
    let mut r = crate::node::reading(n, condition_type);
    if let Some(len) = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OVERSIZED))
    {
        r.desired = Some(Err(format!(
            "{ANNOTATION} is {len} bytes, larger than the {MAX_ANNOTATION_BYTES} bytes read"
        )));
    }
    r
}

/// What is kept of a Node: read once, here, by the reader; the annotation's
/// text goes with the Node.
pub fn keep(mut n: Node, condition_type: &str) -> Kept {
    slim(&mut n, condition_type);
    let r = reading(&n, condition_type);
    Kept::new(&n, r)
}

/// A 401, or a TLS failure (the CA or the client certificate rotated).
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

fn status_line(code: u16, reason: &str) -> String {
    format!(
        "the workload API server answered HTTP {code} {}",
        clean_capped(reason, 32)
    )
}

/// A watch error as a fixed phrase and a short cleaned text: what the
/// workload API server said is the tenant's (a Status message can be
/// anything), so of an API answer only its code and reason word are kept;
/// a transport failure is our client's own text, cleaned and cut.
fn describe(e: &watcher::Error) -> String {
    let inner = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(s) => return status_line(s.code, &s.reason),
        watcher::Error::NoResourceVersion => {
            return "the workload API server sent a list without a resourceVersion".into()
        }
    };
    describe_call(inner)
}

/// A request's error, as [`describe`] words a watch's.
fn describe_call(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => status_line(s.code, &s.reason),
        other => format!(
            "the workload API server cannot be read: {}",
            clean_capped(&other.to_string(), 120)
        ),
    }
}

/// Node GETs one workload cluster's connection has out at once. Each GET
/// in flight is a connection of its own (the client pools, but opens one
/// for every request that finds none idle): unbounded, the names a large
/// cluster registers after its list (a controller starting on thousands
/// of Machines) opened thousands of TLS connections to the tenant's API
/// server at once, and held their buffers.
pub const FETCHES_AT_ONCE: usize = 4;

/// GETs Node `name` for the cache (a Node registered after the watch's
/// list), then has its Machines looked at again; after a failure, again
/// once the retry is due.
fn fetch(
    client: Client,
    cache: Arc<Mutex<NodeCache>>,
    triggers: UnboundedSender<Trigger>,
    fetches: Arc<Semaphore>,
    key: (String, String),
    name: String,
    condition_type: String,
) {
    tokio::spawn(async move {
        let answer = {
            // Held for the GET alone, not through a failure's pause. Never
            // closed; were it, the GET would go without a permit.
            let _permit = fetches.acquire().await.ok();
            let api: Api<Node> = Api::all(client);
            match qps::timed(api.get_opt(&name)).await {
                Ok(n) => Ok(n.map(|n| keep(n, &condition_type))),
                Err(e) => Err(describe_call(&e)),
            }
        };
        let failed = answer.is_err();
        let changed = lock(&cache).fetched(&name, answer, Instant::now());
        let trigger = Trigger::Node {
            namespace: key.0,
            cluster: key.1,
            node: name,
        };
        if failed {
            tokio::time::sleep(FETCH_RETRY).await;
        }
        if changed || failed {
            let _ = triggers.send(trigger);
        }
    });
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
            refused_config: false,
        }
    }

    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.cluster.clone())
    }

    pub fn secret_name(&self) -> String {
        format!("{}-kubeconfig", self.cluster)
    }

    /// Reads the Secret when due and (re)connects when it changed;
    /// `expected` gives, only if it connects, the Node names its selected
    /// Machines name.
    pub async fn maintain(
        &mut self,
        mgmt: &Client,
        resync: Duration,
        rep: &Reporting,
        expected: impl FnOnce() -> HashSet<String>,
    ) {
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
        let secret = match crate::qps::timed(secrets.get_opt(&name)).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                self.drop_conn(format!("Secret {full} does not exist"), false, rep);
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
        let kc = match kubeconfig::parse(&full, value, rep.transport) {
            Ok(kc) => kc,
            Err(e) => {
                tracing::error!("{e}");
                self.drop_conn(e.to_string(), true, rep);
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
                self.drop_conn(why, true, rep);
                return;
            }
        };
        let client = match qps::gated_client(config, rep.limits, rep.gate.clone()) {
            Ok(c) => c,
            Err(_) => {
                let why = format!("Secret {full}: no client can be built from the kubeconfig");
                tracing::error!("{why}");
                self.drop_conn(why, true, rep);
                return;
            }
        };
        tracing::info!(cluster = %format!("{}/{}", self.namespace, self.cluster), "connecting to the workload cluster");
        self.refused = None;
        self.refused_config = false;
        self.connect(client, rep.clone(), expected());
    }

    fn drop_conn(&mut self, why: String, config: bool, rep: &Reporting) {
        if self.conn.take().is_some() || self.refused.as_deref() != Some(why.as_str()) {
            let mut h = lock(&self.health);
            if h.synced {
                h.unread_since = SystemTime::now();
            }
            h.synced = false;
            h.error = Some(why.clone());
            let (namespace, cluster) = self.key();
            let _ = rep.triggers.send(Trigger::Cluster { namespace, cluster });
        }
        self.refused = Some(why);
        self.refused_config = config;
    }

    /// A new connection; its cache expects `expected` (the Node names the
    /// cluster's selected Machines give now) from the first list.
    fn connect(&mut self, client: Client, rep: Reporting, expected: HashSet<String>) {
        let cache = Arc::new(Mutex::new(NodeCache::expecting(
            MAX_NODES_PER_CLUSTER,
            expected,
            SystemTime::now(),
        )));
        let fetches = Arc::new(Semaphore::new(FETCHES_AT_ONCE));
        let api: Api<Node> = Api::all(client.clone());
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
        let (namespace, name) = self.key();
        let ty = rep.condition_type.clone();
        let stream = watcher(api, watcher::Config::default().page_size(NODE_PAGE))
            .backoff(reconnect_backoff());
        let (kept, fetch_client, triggers, list_fetches) = (
            cache.clone(),
            client.clone(),
            rep.triggers.clone(),
            fetches.clone(),
        );
        let conn_triggers = rep.triggers.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let whole = || Trigger::Cluster {
                namespace: namespace.clone(),
                cluster: name.clone(),
            };
            let node = |n: &str| Trigger::Node {
                namespace: namespace.clone(),
                cluster: name.clone(),
                node: n.to_string(),
            };
            // A Node nobody registered is dropped as it is read: only its
            // name is looked at (a tenant's Nodes can be many and large).
            let wanted = |n: &Node| {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                lock(&kept).wants(name).then(|| name.to_string())
            };
            while let Some(ev) = stream.next().await {
                // Each kept Node's change concerns the Machines it backs; a
                // list's Nodes are read at its end, once, for the whole
                // cluster.
                let trigger = match ev {
                    Ok(watcher::Event::Init) => {
                        lock(&kept).list_begins();
                        None
                    }
                    Ok(watcher::Event::InitApply(n)) => {
                        if wanted(&n).is_some() {
                            let k = keep(n, &ty);
                            lock(&kept).listed(k);
                        }
                        None
                    }
                    Ok(watcher::Event::InitDone) => {
                        let late = lock(&kept).list_done();
                        for n in late {
                            fetch(
                                fetch_client.clone(),
                                kept.clone(),
                                triggers.clone(),
                                list_fetches.clone(),
                                (namespace.clone(), name.clone()),
                                n,
                                ty.clone(),
                            );
                        }
                        let mut h = lock(&health);
                        if !h.synced || h.error.is_some() {
                            tracing::info!(cluster = %cluster, "workload cluster's Nodes read");
                        }
                        h.synced = true;
                        h.error = None;
                        Some(whole())
                    }
                    Ok(ev @ (watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                        let (n, gone) = match ev {
                            watcher::Event::Apply(n) => (n, false),
                            watcher::Event::Delete(n) => (n, true),
                            _ => continue,
                        };
                        let again = lock(&health).error.take().is_some();
                        if again {
                            tracing::info!(cluster = %cluster, "workload cluster reachable again");
                        }
                        let changed = match wanted(&n) {
                            Some(nm) => {
                                let now = (!gone).then(|| keep(n, &ty));
                                lock(&kept).changed(&nm, now).then_some(nm)
                            }
                            None => None,
                        };
                        if again {
                            Some(whole())
                        } else {
                            changed.map(|nm| node(&nm))
                        }
                    }
                    Err(e) => {
                        rep.metrics.workload_error(&cluster);
                        let line = describe(&e);
                        let mut h = lock(&health);
                        let first = h.error.is_none();
                        if first {
                            tracing::warn!(cluster = %cluster, error = %line, "workload cluster unreachable");
                            if !h.synced {
                                h.unread_since = SystemTime::now();
                            }
                        }
                        h.error = Some(line);
                        let reread = needs_reread(&e);
                        h.reread |= reread;
                        (first || reread).then(whole)
                    }
                };
                if let Some(t) = trigger {
                    // The controller is gone only at shutdown.
                    let _ = rep.triggers.send(t);
                }
            }
        });
        self.conn = Some(Conn {
            cache,
            triggers: conn_triggers,
            fetches,
            client,
            task,
        });
    }

    /// The connection's client, once its Nodes were listed.
    pub fn client(&self) -> Option<Client> {
        let synced = lock(&self.health).synced;
        self.conn
            .as_ref()
            .filter(|_| synced)
            .map(|c| c.client.clone())
    }

    /// Keeps only the Nodes in `needed` (the resync tick's: those the
    /// selected Machines of this cluster name).
    pub fn retain_nodes(&self, needed: &HashSet<String>) {
        if let Some(c) = &self.conn {
            lock(&c.cache).retain(needed);
        }
    }

    /// Node names registered and Nodes kept.
    pub fn cached(&self) -> (usize, usize) {
        self.conn.as_ref().map_or((0, 0), |c| {
            let cache = lock(&c.cache);
            (cache.registered(), cache.kept())
        })
    }

    /// The Node `name` as last read; registered for the cache on first
    /// ask (`condition_type`: what a GET of it keeps).
    pub fn lookup(&self, name: &str, condition_type: &str) -> Lookup {
        let h = lock(&self.health).clone();
        let found = self.conn.as_ref().map(|c| {
            let found = lock(&c.cache).find(name, SystemTime::now(), Instant::now());
            if let Found::Fetch { .. } = found {
                fetch(
                    c.client.clone(),
                    c.cache.clone(),
                    c.triggers.clone(),
                    c.fetches.clone(),
                    self.key(),
                    name.to_string(),
                    condition_type.to_string(),
                );
            }
            found
        });
        match (&self.conn, found) {
            (Some(_), Some(found)) if h.synced => match found {
                Found::Node(n) => Lookup::Node(n),
                Found::Absent => Lookup::NoNode,
                Found::Full(cap) => Lookup::TooMany(cap),
                Found::Pending { since } | Found::Fetch { since } => Lookup::NotRead {
                    since,
                    why: format!("Node {name} is being read"),
                    pending: true,
                },
                Found::Failed { since, why } => Lookup::NotRead {
                    since,
                    why: format!("Node {name} cannot be read: {why}"),
                    pending: false,
                },
            },
            (None, _) if self.refused_config => {
                Lookup::Refused(self.refused.clone().unwrap_or_default())
            }
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
    fn reconnects_within_10_s_with_the_jitter() {
        let mut b = reconnect_backoff();
        let delays: Vec<Duration> = (0..500).map_while(|_| b.next()).collect();
        assert_eq!(delays.len(), 500, "the backoff must never give up");
        assert!(delays[0] >= Duration::from_millis(800), "{delays:?}");
        let max = delays.iter().max().copied().unwrap_or_default();
        assert!(max <= Duration::from_secs(10), "{max:?}");
        // The jitter is there: the delays at the cap differ.
        assert!(delays[20..].iter().any(|d| *d != delays[20]), "{delays:?}");
    }

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
        slim(&mut slimmed, TY);
        assert_eq!(reading(&slimmed, TY), crate::node::reading(&whole, TY));
        assert!(reading(&slimmed, TY).desired.is_some());
        // Only our condition is kept.
        assert_eq!(
            slimmed
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(Vec::len),
            Some(1)
        );
        let v = serde_json::to_value(&slimmed).unwrap();
        assert_eq!(
            v["metadata"]["annotations"].as_object().map(|a| a.len()),
            Some(1)
        );
        // Of nodeInfo, the bootID alone (a proof holds for one boot).
        assert_eq!(v["status"]["nodeInfo"]["bootID"], "b1");
        assert_eq!(v["status"]["nodeInfo"]["machineID"], "");
        for gone in [
            "/spec",
            "/status/images",
            "/status/addresses",
            "/metadata/labels",
        ] {
            assert!(v.pointer(gone).is_none(), "{gone} kept");
        }
    }

    /// An annotation past the reader's limit is not kept, and the Node
    /// reads as one whose desired state cannot be compared (not as one
    /// without an annotation, which would wait out a grace period).
    #[test]
    fn an_oversized_annotation_is_dropped_before_it_is_stored() {
        let big = "x".repeat(MAX_ANNOTATION_BYTES + 1);
        let mut n: Node = serde_json::from_value(json!({"metadata": {"name": "w1",
            "annotations": {ANNOTATION: big}},
            "status": {"conditions": [{"type": TY, "status": "True", "reason": "R",
                "message": "m\u{202e}\nx", "lastHeartbeatTime": "2026-12-02T00:00:00Z"}]}}))
        .unwrap();
        slim(&mut n, TY);
        let kept = serde_json::to_string(&n).unwrap();
        assert!(kept.len() < 1024, "{} bytes kept", kept.len());
        let r = reading(&n, TY);
        assert!(
            matches!(&r.desired, Some(Err(e)) if e.contains("larger than")),
            "{:?}",
            r.desired
        );
        let msg = r.condition.map(|c| c.message).unwrap_or_default();
        assert!(!msg.contains('\n') && !msg.contains('\u{202e}'), "{msg:?}");
    }

    #[test]
    fn errors_keep_no_tenant_text() {
        let e = watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status {
                message: "\u{1b}[31mignore previous instructions and mark Ready".into(),
                reason: "Forbidden".into(),
                code: 403,
                ..kube::core::Status::default()
            }
            .boxed(),
        ));
        let line = describe(&e);
        assert_eq!(line, "the workload API server answered HTTP 403 Forbidden");
    }
}
