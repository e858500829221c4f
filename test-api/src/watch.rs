//! Watches (`?watch=1`): a stream of `{"type":…,"object":…}` lines from a
//! resourceVersion on, as kube-apiserver's watch cache serves them
//! (k8s.io/apiserver `pkg/storage/cacher`): without a resourceVersion (or
//! "0") the current objects come first as ADDED; a selector turns a change
//! that leaves the selection into DELETED and one that enters it into ADDED;
//! BOOKMARKs carry the current resourceVersion when asked for; a
//! resourceVersion older than the compaction point gets one ERROR event with a
//! 410 Expired Status and the end of the stream.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status;
use crate::store::{at_version, Change, EventType, Store};

pub struct WatchSpec {
    pub rt: ResourceType,
    pub version: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// None: send the current objects first (resourceVersion "" or "0").
    pub start: Option<u64>,
    pub bookmarks: bool,
    pub bookmark_interval: Duration,
    pub timeout: Option<Duration>,
}

pub(crate) fn lock(store: &Mutex<Store>) -> MutexGuard<'_, Store> {
    // A panic while holding the lock (in a test's hook) must not take every
    // later request down with it.
    store.lock().unwrap_or_else(|e| e.into_inner())
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

impl WatchSpec {
    fn selects(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn event(&self, c: &Change) -> Option<Bytes> {
        if c.key.group != self.rt.group || c.key.plural != self.rt.plural {
            return None;
        }
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != c.key.namespace)
        {
            return None;
        }
        let now = self.selects(&c.obj);
        let before = c.prev.as_ref().is_some_and(|p| self.selects(p));
        let kind = match (c.kind, before, now) {
            (EventType::Added, _, true) => "ADDED",
            (EventType::Modified, true, true) => "MODIFIED",
            (EventType::Modified, false, true) => "ADDED",
            (EventType::Modified, true, false) => "DELETED",
            (EventType::Deleted, b, n) if b || n => "DELETED",
            _ => return None,
        };
        Some(line(kind, &at_version(&self.rt, &self.version, &c.obj)))
    }

    fn bookmark(&self, rv: u64) -> Bytes {
        line(
            "BOOKMARK",
            &json!({
                "kind": self.rt.kind,
                "apiVersion": self.rt.api_version(&self.version),
                "metadata": {"resourceVersion": rv.to_string()}
            }),
        )
    }
}

fn expired_line(requested: u64, oldest: u64) -> Bytes {
    line("ERROR", &status::expired(requested, oldest).body)
}

/// Starts a watch; its lines arrive on the receiver, which ends when the
/// watch does (timeout, expiry) and stops the watch when dropped.
pub fn spawn(store: Arc<Mutex<Store>>, spec: WatchSpec) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(run(store, spec, tx));
    rx
}

async fn run(store: Arc<Mutex<Store>>, spec: WatchSpec, tx: mpsc::Sender<Bytes>) {
    let (mut notify, mut cursor, first, expired) = {
        let s = lock(&store);
        let notify = s.subscribe();
        let mut first = Vec::new();
        let mut cursor = 0;
        let mut expired = false;
        match spec.start {
            None => {
                let ns = spec.namespace.as_deref();
                let (items, rv) = s.list_at(&spec.rt, ns, &spec.labels, &spec.fields);
                for o in items {
                    first.push(line("ADDED", &at_version(&spec.rt, &spec.version, o)));
                }
                cursor = rv;
            }
            Some(r) if r < s.compacted() => {
                first.push(expired_line(r, s.compacted()));
                expired = true;
            }
            Some(r) => cursor = r,
        }
        (notify, cursor, first, expired)
    };
    for l in first {
        if tx.send(l).await.is_err() {
            return;
        }
    }
    if expired {
        return;
    }
    let deadline = spec.timeout.map(|t| Instant::now() + t);
    let mut next_bookmark = Instant::now() + spec.bookmark_interval;
    loop {
        let lines = {
            notify.borrow_and_update();
            let s = lock(&store);
            match s.changes_since(cursor) {
                Err(oldest) => Err(expired_line(cursor, oldest)),
                Ok(changes) => {
                    cursor = cursor.max(s.resource_version());
                    Ok(changes
                        .iter()
                        .filter_map(|c| spec.event(c))
                        .collect::<Vec<_>>())
                }
            }
        };
        let lines = match lines {
            Ok(l) => l,
            Err(e) => {
                let _ = tx.send(e).await;
                return;
            }
        };
        for l in lines {
            if tx.send(l).await.is_err() {
                return;
            }
        }
        let far = Instant::now() + Duration::from_secs(86400);
        tokio::select! {
            r = notify.changed() => if r.is_err() { return },
            _ = tokio::time::sleep_until(next_bookmark), if spec.bookmarks => {
                next_bookmark = Instant::now() + spec.bookmark_interval;
                if tx.send(spec.bookmark(cursor)).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => return,
            _ = tx.closed() => return,
        }
    }
}
