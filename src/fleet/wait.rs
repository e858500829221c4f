//! Following a rollout: one `Watch` stream per node, every report judged
//! again here, reconnects with backoff and jitter, boot-id changes noted.
//!
//! [`PoolWatch`] owns the streams and the pool's state; a controller calls
//! [`PoolWatch::set_nodes`] whenever its node set changes and
//! [`PoolWatch::next`] to learn what changed. The state itself is the pure
//! [`PoolState`].

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use tokio::{
    sync::mpsc,
    task::AbortHandle,
    time::{timeout, timeout_at, Instant},
};

use super::{
    client::Client,
    nodes::Node,
    pool::{Change, Event, EventKind, PoolState},
    result::{Answer, AskError},
};
use crate::proto::v1::{
    readiness_service_client::ReadinessServiceClient, DesiredState, WatchRequest, WatchResponse,
};

/// How watch streams are kept.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// First reconnect delay; doubles per failed attempt up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A stream with no message (report or heartbeat) for this long is
    /// considered dead and reconnected. The agent's default heartbeat is
    /// 30 s, so the default allows three missed heartbeats.
    pub idle_timeout: Duration,
    /// HTTP/2 pings on watch connections, so a machine that vanished
    /// without closing TCP is noticed within ping + `--timeout`.
    pub keepalive: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(95),
            keepalive: Duration::from_secs(15),
        }
    }
}

/// The delay before reconnect attempt `attempt` (1-based): exponential,
/// capped, then "equal jitter" (half fixed, half random) so a thousand
/// watchers that lost the same agent pool do not reconnect in lockstep.
pub fn backoff(attempt: u32, opts: &WatchOptions) -> Duration {
    let exp = attempt.saturating_sub(1).min(20);
    let base = opts
        .backoff_min
        .saturating_mul(1u32 << exp)
        .min(opts.backoff_max);
    let half = base / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(fastrand::u64(0..=jitter_ms))
}

/// Watch streams to a changing set of nodes, and the pool's state.
///
/// ```no_run
/// # async fn f(nodes: Vec<sandbox_readiness::fleet::nodes::Node>, desired: sandbox_readiness::proto::v1::DesiredState) {
/// use sandbox_readiness::fleet::{client::{Client, ClientOptions}, wait::{PoolWatch, WatchOptions}};
/// let mut w = PoolWatch::new(Client::new(ClientOptions::default()), desired, WatchOptions::default());
/// w.set_nodes(&nodes);
/// while !w.state().all_converged() {
///     for change in w.next().await {
///         println!("{change}");
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct PoolWatch {
    client: Client,
    desired: Arc<DesiredState>,
    opts: WatchOptions,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    tasks: HashMap<String, AbortHandle>,
    next_epoch: u64,
    state: PoolState,
}

impl PoolWatch {
    pub fn new(client: Client, desired: DesiredState, opts: WatchOptions) -> Self {
        let (tx, rx) = mpsc::channel(1024);
        PoolWatch {
            client,
            desired: Arc::new(desired),
            opts,
            tx,
            rx,
            tasks: HashMap::new(),
            next_epoch: 0,
            state: PoolState::new(Instant::now()),
        }
    }

    /// A node is the same node while both its label and its address are:
    /// a machine replaced under the same IP with a new name is a new node.
    /// A Machine's node name counts too: the watcher that started before
    /// the node joined verified the agent against the Machine's name.
    fn key(node: &Node) -> String {
        match node.node_name() {
            Some(n) => format!("{}/{n}@{}", node.name, node.key()),
            None => format!("{}@{}", node.name, node.key()),
        }
    }

    /// Follows exactly `nodes` from now on: new ones get a watcher, ones no
    /// longer listed are dropped. Returns what changed.
    pub fn set_nodes(&mut self, nodes: &[Node]) -> Vec<Change> {
        let now = Instant::now();
        let wanted: HashMap<String, &Node> = nodes.iter().map(|n| (Self::key(n), n)).collect();
        let mut changes = Vec::new();
        let gone: Vec<String> = self
            .tasks
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(t) = self.tasks.remove(&key) {
                t.abort();
            }
            changes.extend(self.state.remove(&key));
        }
        let mut added: Vec<(&String, &&Node)> = wanted
            .iter()
            .filter(|(k, _)| !self.tasks.contains_key(*k))
            .collect();
        added.sort_by(|a, b| super::nodes::natural_cmp(&a.1.name, &b.1.name));
        let mut seen = HashSet::new();
        for (key, node) in added {
            if !seen.insert(key.clone()) {
                continue;
            }
            self.next_epoch += 1;
            let epoch = self.next_epoch;
            changes.push(self.state.add(key.clone(), (*node).clone(), epoch, now));
            let task = tokio::spawn(watch_node(
                self.client.clone(),
                (*node).clone(),
                Arc::clone(&self.desired),
                self.opts.clone(),
                key.clone(),
                epoch,
                self.tx.clone(),
            ));
            self.tasks.insert(key.clone(), task.abort_handle());
        }
        changes
    }

    /// Judges against `desired` from now on: the reports held are judged
    /// again at once, and every stream is reopened with the new question
    /// (an agent observes the sysctls it is asked about). Returns the
    /// verdicts that changed.
    pub fn set_desired(&mut self, desired: DesiredState) -> Vec<Change> {
        let changes = self.state.rejudge(&desired);
        self.desired = Arc::new(desired);
        let nodes: HashMap<String, Node> = self
            .state
            .entries_with_keys()
            .map(|(k, e)| (k.clone(), e.node.clone()))
            .collect();
        for (key, node) in nodes {
            if let Some(t) = self.tasks.remove(&key) {
                t.abort();
            }
            self.next_epoch += 1;
            let epoch = self.next_epoch;
            self.state.set_epoch(&key, epoch);
            let task = tokio::spawn(watch_node(
                self.client.clone(),
                node,
                Arc::clone(&self.desired),
                self.opts.clone(),
                key.clone(),
                epoch,
                self.tx.clone(),
            ));
            self.tasks.insert(key, task.abort_handle());
        }
        changes
    }

    /// Waits for the next watcher event and applies it; returns the changes
    /// it caused (often none: heartbeats, repeated errors). Cancel-safe.
    pub async fn next(&mut self) -> Vec<Change> {
        match self.rx.recv().await {
            Some(ev) => self.state.apply(ev, Instant::now()),
            // Never: we hold a sender ourselves.
            None => std::future::pending().await,
        }
    }

    pub fn state(&self) -> &PoolState {
        &self.state
    }
}

impl Drop for PoolWatch {
    fn drop(&mut self) {
        for t in self.tasks.values() {
            t.abort();
        }
    }
}

/// A stream that lived at least this long and ended cleanly is replaced
/// without a word; a shorter one counts as a failure (with backoff), so an
/// agent that ends streams at once cannot make the watcher spin.
const QUIET_RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// One node's watcher: connect, stream, and on any failure report it and
/// reconnect after a backoff, until aborted.
async fn watch_node(
    client: Client,
    node: Node,
    desired: Arc<DesiredState>,
    opts: WatchOptions,
    key: String,
    epoch: u64,
    tx: mpsc::Sender<Event>,
) {
    let mut attempt: u32 = 0;
    loop {
        let began = Instant::now();
        let (heard, error) = watch_once(&client, &node, &desired, &opts, &key, epoch, &tx).await;
        let Some(error) = error else { return };
        if heard
            && matches!(error, AskError::StreamEnded)
            && began.elapsed() >= QUIET_RECONNECT_AFTER
        {
            // The agent ended a stream cleanly after reports: it does so at
            // a connection's maximum age, and when it stops. Reconnect at
            // once and say nothing: the next report tells whether anything
            // changed, and a failed reconnect is reported as usual.
            attempt = 0;
            continue;
        }
        attempt = if heard { 1 } else { attempt.saturating_add(1) };
        let retry_in = (!error.is_permanent()).then(|| backoff(attempt, &opts));
        let ev = Event {
            key: key.clone(),
            epoch,
            kind: EventKind::Failed { error, retry_in },
        };
        if tx.send(ev).await.is_err() {
            return;
        }
        match retry_in {
            Some(d) => tokio::time::sleep(d).await,
            // Nothing will change for this node: wait to be aborted.
            None => std::future::pending::<()>().await,
        }
    }
}

/// One stream's life. Returns whether any report arrived, and the error
/// that ended it (`None` when the receiving side is gone).
async fn watch_once(
    client: &Client,
    node: &Node,
    desired: &DesiredState,
    opts: &WatchOptions,
    key: &str,
    epoch: u64,
    tx: &mpsc::Sender<Event>,
) -> (bool, Option<AskError>) {
    let timeout_d = client.options().timeout;
    let send = |msg: WatchResponse| async move {
        let Some(report) = msg.report else {
            // A heartbeat: the last report stands. (Older agents repeat
            // the report in it, which is then judged like any other.)
            if msg.heartbeat {
                return Ok(());
            }
            return Err(Some(AskError::BadAnswer(
                "a watch message without a report".into(),
            )));
        };
        let answer = Answer::judge(desired, report, msg.verdict);
        let ev = Event {
            key: key.to_string(),
            epoch,
            kind: EventKind::Answer(Box::new(answer)),
        };
        tx.send(ev).await.map_err(|_| None)
    };

    // Connecting and the first report share the deadline and one of the
    // `parallel` slots; the open stream holds no slot.
    let slot = client.slot().await;
    let deadline = Instant::now() + timeout_d;
    let channel = match client.connect(node, deadline, Some(opts.keepalive)).await {
        Ok(c) => c,
        Err(e) => return (false, Some(e)),
    };
    let mut rpc = ReadinessServiceClient::new(channel);
    // No grpc-timeout: the stream is meant to live as long as the wait.
    let req = tonic::Request::new(WatchRequest {
        desired: Some(desired.clone()),
    });
    let mut stream = match timeout_at(deadline, rpc.watch(req)).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => return (false, Some(client.status_error(&s))),
        Err(_) => return (false, Some(AskError::NoAnswer(timeout_d))),
    };
    let first = match timeout_at(deadline, stream.message()).await {
        Ok(Ok(Some(m))) => m,
        Ok(Ok(None)) => return (false, Some(AskError::StreamEnded)),
        Ok(Err(s)) => return (false, Some(client.status_error(&s))),
        Err(_) => return (false, Some(AskError::NoAnswer(timeout_d))),
    };
    drop(slot);
    if let Err(e) = send(first).await {
        return (false, e);
    }
    loop {
        let msg = match timeout(opts.idle_timeout, stream.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => return (true, Some(AskError::StreamEnded)),
            Ok(Err(s)) => return (true, Some(client.status_error(&s))),
            Err(_) => return (true, Some(AskError::Idle(opts.idle_timeout))),
        };
        if let Err(e) = send(msg).await {
            return (true, e);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::fleet::nodes::parse_entry;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let o = WatchOptions::default();
        for attempt in 1..40 {
            let d = backoff(attempt, &o);
            let exp = o
                .backoff_min
                .saturating_mul(1 << (attempt - 1).min(20))
                .min(o.backoff_max);
            assert!(d >= exp / 2 && d <= exp, "{attempt}: {d:?} vs {exp:?}");
        }
        let spread: HashSet<_> = (0..50).map(|_| backoff(10, &o)).collect();
        assert!(spread.len() > 10, "jitter must spread reconnects");
    }

    #[tokio::test]
    async fn watcher_reports_refusal_and_retries() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = Client::new(super::super::client::ClientOptions {
            timeout: Duration::from_millis(500),
            ..Default::default()
        });
        let opts = WatchOptions {
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_millis(40),
            ..WatchOptions::default()
        };
        let mut w = PoolWatch::new(client, DesiredState::default(), opts);
        let node = parse_entry(&format!("127.0.0.1:{port}"), 1).unwrap();
        let added = w.set_nodes(std::slice::from_ref(&node));
        assert_eq!(added.len(), 1);
        let c = tokio::time::timeout(Duration::from_secs(2), w.next())
            .await
            .unwrap();
        assert!(
            matches!(&c[..], [Change::Unreachable { error, retry_in: Some(_), .. }] if error == "connection refused"),
            "{c:?}"
        );
        // Retries keep coming (quietly) until the node is dropped.
        let quiet = tokio::time::timeout(Duration::from_secs(2), w.next())
            .await
            .unwrap();
        assert!(quiet.is_empty());
        let removed = w.set_nodes(&[]);
        assert_eq!(
            removed,
            [Change::Removed {
                name: node.name.clone()
            }]
        );
        assert_eq!(w.state().counts().total, 0);
    }
}
