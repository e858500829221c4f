//! The Nodes of one workload cluster the controller keeps. Pure: the
//! watch, the reads and the clock's instants are the caller's
//! ([`crate::workload`]).
//!
//! A workload cluster is a tenant's: its admins can create as many Nodes as
//! they like, each with a 256 KiB annotation. What the controller holds is
//! therefore bounded by what the management cluster says, not by what the
//! tenant writes:
//! - only the Nodes some selected Machine names (`status.nodeRef`) are
//!   kept; a Machine's first look-up registers its Node, and the resync
//!   tick drops the names no Machine needs any more ([`NodeCache::retain`]);
//! - each is kept as what a decision reads ([`Kept`]): its identity, its
//!   providerID, the reader's [`Reading`] (our one condition, message
//!   capped; the desired state parsed and validated, never the annotation's
//!   text; the two bootIDs);
//! - at most [`MAX_NODES_PER_CLUSTER`] names per cluster: past it a
//!   Machine reads [`Found::Full`] (its condition says so) rather than the
//!   controller growing without end.
//!
//! The watch still sees every Node of the cluster (it must, to see a
//! change of a kept one), one page of a list at a time, and drops the rest
//! as it reads them. A Node registered after the watch's list went past it
//! is read with one GET ([`Found::Fetch`]); a watch event for it that
//! arrives while that GET is out wins over the GET's answer.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::core::v1::Node;
use sandbox_readiness::nodestatus::read::Reading;

/// The most Node names one workload cluster's cache holds: Kubernetes'
/// own tested limit for a cluster (5,000 nodes, "Considerations for large
/// clusters"). A pool past it reads `Unknown` / `TooManyNodes`.
pub const MAX_NODES_PER_CLUSTER: usize = 5_000;

/// A failed GET of a registered Node is tried again after this.
pub const FETCH_RETRY: Duration = Duration::from_secs(5);

/// What the controller keeps of a Node.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub name: String,
    pub uid: String,
    /// Cluster API matches a Node to its Machine by it (one incarnation).
    pub provider_id: Option<String>,
    /// The condition, the desired state, the bootIDs: what the reader
    /// (`check --from-node-conditions` too) judges.
    pub reading: Reading,
    resource_version: Option<u64>,
}

impl Kept {
    /// What to keep of a Node (`slimmed`: cut by the caller to what the
    /// reader takes, see `workload::slim`).
    pub fn new(slimmed: &Node, reading: Reading) -> Kept {
        let md = &slimmed.metadata;
        Kept {
            name: md.name.clone().unwrap_or_default(),
            uid: md.uid.clone().unwrap_or_default(),
            provider_id: slimmed.spec.as_ref().and_then(|s| s.provider_id.clone()),
            reading,
            resource_version: md.resource_version.as_deref().and_then(|v| v.parse().ok()),
        }
    }

    /// The bootID kubelet reports (`status.nodeInfo.bootID`).
    pub fn boot_id(&self) -> &str {
        &self.reading.boot.node
    }
}

/// What the cache can say of a Node name.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Node(Arc<Kept>),
    /// The cluster was read and holds no Node of the name.
    Absent,
    /// Registered at `since`; its list or GET has not answered yet.
    Pending {
        since: SystemTime,
    },
    /// Registered now, after the watch's list: the caller GETs it and
    /// hands the answer to [`NodeCache::fetched`].
    Fetch {
        since: SystemTime,
    },
    /// Its GET failed (one line); tried again after [`FETCH_RETRY`].
    Failed {
        since: SystemTime,
        why: String,
    },
    /// The cluster's cache holds [`MAX_NODES_PER_CLUSTER`] names already.
    Full(usize),
}

#[derive(Debug, Clone)]
struct Want {
    since: SystemTime,
    /// A GET is out for it.
    fetching: bool,
    /// A watch event for it arrived since the GET went out: the GET's
    /// answer may be older and is dropped.
    touched: bool,
    /// Registered while a list was under way (perhaps past its page).
    late: bool,
    failed: Option<(Instant, String)>,
}

/// One workload cluster's kept Nodes.
#[derive(Debug)]
pub struct NodeCache {
    cap: usize,
    wanted: HashMap<String, Want>,
    kept: HashMap<String, Arc<Kept>>,
    /// A list under way: what it kept so far (it replaces `kept` whole
    /// when done, so a Node deleted during an outage goes).
    listing: Option<HashMap<String, Arc<Kept>>>,
    /// A list completed at least once.
    synced: bool,
}

impl Default for NodeCache {
    fn default() -> Self {
        NodeCache::with_cap(MAX_NODES_PER_CLUSTER)
    }
}

impl NodeCache {
    pub fn with_cap(cap: usize) -> NodeCache {
        NodeCache {
            cap,
            wanted: HashMap::new(),
            kept: HashMap::new(),
            listing: None,
            synced: false,
        }
    }

    /// A cache for a new connection, its first list not yet begun, with
    /// `names` registered (the Nodes its cluster's selected Machines name
    /// then): the list keeps each as it passes, so none of them needs a
    /// GET of its own after it. Registered one by one as Machines are
    /// reconciled instead, most of a large cluster's names come after the
    /// list went past their page, and each is then read with a GET. Names
    /// past the cap are left to [`NodeCache::find`] (it says `Full`).
    pub fn expecting(
        cap: usize,
        names: impl IntoIterator<Item = String>,
        now: SystemTime,
    ) -> NodeCache {
        let mut c = NodeCache::with_cap(cap);
        for name in names.into_iter().take(cap) {
            c.wanted.insert(
                name,
                Want {
                    since: now,
                    fetching: false,
                    touched: false,
                    late: false,
                    failed: None,
                },
            );
        }
        c
    }

    /// The Node `name` as kept, registering the name on first ask.
    pub fn find(&mut self, name: &str, now: SystemTime, clock: Instant) -> Found {
        if let Some(k) = self.kept.get(name) {
            return Found::Node(k.clone());
        }
        let listing = self.listing.is_some();
        let synced = self.synced;
        let Some(w) = self.wanted.get_mut(name) else {
            if self.wanted.len() >= self.cap {
                return Found::Full(self.cap);
            }
            // Before the first list the list brings it; during one it may
            // be past its page (read when the list ends); after, only a GET.
            let fetch = synced && !listing;
            self.wanted.insert(
                name.to_string(),
                Want {
                    since: now,
                    fetching: fetch,
                    touched: false,
                    late: listing,
                    failed: None,
                },
            );
            return if fetch {
                Found::Fetch { since: now }
            } else {
                Found::Pending { since: now }
            };
        };
        if let Some((at, why)) = &w.failed {
            if clock.saturating_duration_since(*at) < FETCH_RETRY {
                return Found::Failed {
                    since: w.since,
                    why: why.clone(),
                };
            }
            w.failed = None;
            w.fetching = true;
            w.touched = false;
            return Found::Fetch { since: w.since };
        }
        if w.fetching || !synced || (listing && w.late) {
            return Found::Pending { since: w.since };
        }
        Found::Absent
    }

    /// The answer to a [`Found::Fetch`]: `Ok(None)` is a 404. True when
    /// it changed what a look-up of `name` says.
    pub fn fetched(
        &mut self,
        name: &str,
        answer: Result<Option<Kept>, String>,
        clock: Instant,
    ) -> bool {
        let Some(w) = self.wanted.get_mut(name) else {
            return false;
        };
        if !w.fetching {
            return false;
        }
        w.fetching = false;
        if w.touched {
            // The watch has spoken since: its word is newer.
            return true;
        }
        match answer {
            Ok(Some(k)) => {
                let k = Arc::new(k);
                if let Some(l) = self.listing.as_mut() {
                    l.insert(name.to_string(), k.clone());
                }
                self.kept.insert(name.to_string(), k);
            }
            Ok(None) => {}
            Err(why) => w.failed = Some((clock, why)),
        }
        true
    }

    /// A list begins (the first, or a relist after a 410 or a reconnect).
    pub fn list_begins(&mut self) {
        self.listing = Some(HashMap::new());
        for w in self.wanted.values_mut() {
            w.late = false;
        }
    }

    /// One Node of the list: kept when registered.
    pub fn listed(&mut self, k: Kept) {
        let Some(w) = self.wanted.get_mut(&k.name) else {
            return;
        };
        w.touched = true;
        if let Some(l) = self.listing.as_mut() {
            l.insert(k.name.clone(), Arc::new(k));
        }
    }

    /// The list is complete: it replaces what was kept. The names
    /// registered during it and not in it are returned: the caller GETs
    /// each (they may have been past their page when registered).
    pub fn list_done(&mut self) -> Vec<String> {
        let Some(l) = self.listing.take() else {
            return Vec::new();
        };
        self.kept = l;
        self.synced = true;
        let mut fetch = Vec::new();
        for (name, w) in &mut self.wanted {
            if std::mem::take(&mut w.late) && !self.kept.contains_key(name) && !w.fetching {
                w.fetching = true;
                w.touched = false;
                fetch.push(name.clone());
            }
        }
        fetch
    }

    /// A watch event: the Node now (`Some`) or gone (`None`). True when it
    /// is a registered name (its Machines are to be looked at again).
    pub fn changed(&mut self, name: &str, now: Option<Kept>) -> bool {
        let Some(w) = self.wanted.get_mut(name) else {
            return false;
        };
        w.touched = true;
        w.failed = None;
        match now {
            Some(k) => {
                self.kept.insert(name.to_string(), Arc::new(k));
            }
            None => {
                self.kept.remove(name);
            }
        }
        true
    }

    /// Keeps only the names in `needed` (the resync tick's: the Nodes the
    /// selected Machines of the cluster name).
    pub fn retain(&mut self, needed: &HashSet<String>) {
        self.wanted.retain(|n, _| needed.contains(n));
        self.kept.retain(|n, _| needed.contains(n));
        if let Some(l) = self.listing.as_mut() {
            l.retain(|n, _| needed.contains(n));
        }
    }

    /// Whether `name` is registered: a watch event of any other Node is
    /// dropped unread.
    pub fn wants(&self, name: &str) -> bool {
        self.wanted.contains_key(name)
    }

    /// Names registered (kept or not).
    pub fn registered(&self) -> usize {
        self.wanted.len()
    }

    /// Nodes kept.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(name: &str, rv: u64, status: &str) -> Kept {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": format!("u-{name}"), "resourceVersion": rv.to_string()},
            "status": {"conditions": [{"type": "T", "status": status, "reason": "R",
                "lastHeartbeatTime": "2026-12-06T00:00:00Z"}]}}))
        .unwrap();
        let v = serde_json::to_value(&node).unwrap();
        Kept::new(&node, sandbox_readiness::nodestatus::read::read(&v, "T"))
    }

    fn status(f: &Found) -> Option<String> {
        match f {
            Found::Node(k) => k
                .reading
                .condition
                .as_ref()
                .map(|c| c.status.as_str().to_string()),
            _ => None,
        }
    }

    fn now() -> (SystemTime, Instant) {
        (SystemTime::now(), Instant::now())
    }

    #[test]
    fn only_registered_nodes_are_kept() {
        let (t, c) = now();
        let mut cache = NodeCache::default();
        assert!(matches!(cache.find("w1", t, c), Found::Pending { .. }));
        cache.list_begins();
        for i in 0..100 {
            cache.listed(kept(&format!("n{i}"), i, "True"));
        }
        cache.listed(kept("w1", 7, "True"));
        assert!(cache.list_done().is_empty());
        assert_eq!(cache.kept(), 1);
        assert_eq!(status(&cache.find("w1", t, c)).as_deref(), Some("True"));
        // An unregistered Node's events are dropped, and say so.
        assert!(!cache.changed("n5", Some(kept("n5", 200, "False"))));
        assert_eq!(cache.kept(), 1);
        assert!(cache.changed("w1", Some(kept("w1", 201, "False"))));
        assert_eq!(status(&cache.find("w1", t, c)).as_deref(), Some("False"));
        assert!(cache.changed("w1", None));
        assert_eq!(cache.find("w1", t, c), Found::Absent);
    }

    #[test]
    fn names_expected_at_connect_are_kept_by_the_list_not_fetched() {
        let (t, c) = now();
        let names = (0..5).map(|i| format!("w{i}"));
        let mut cache = NodeCache::expecting(3, names, t);
        assert_eq!(cache.registered(), 3);
        // Reconciles during the list read them as pending, no GET.
        assert!(matches!(cache.find("w1", t, c), Found::Pending { .. }));
        cache.list_begins();
        for i in 0..5 {
            cache.listed(kept(&format!("w{i}"), i, "True"));
        }
        // Nothing left to GET when the list ends: every expected Node was
        // kept as the list passed it.
        assert!(cache.list_done().is_empty());
        assert_eq!(cache.kept(), 3);
        assert_eq!(status(&cache.find("w2", t, c)).as_deref(), Some("True"));
        // Past the cap, a name is refused as before.
        assert_eq!(cache.find("w4", t, c), Found::Full(3));
    }

    #[test]
    fn a_node_registered_after_the_list_is_fetched_and_the_watch_wins() {
        let (t, c) = now();
        let mut cache = NodeCache::default();
        cache.list_begins();
        cache.list_done();
        assert!(matches!(cache.find("w2", t, c), Found::Fetch { .. }));
        // Asked again while the GET is out: pending, no second GET.
        assert!(matches!(cache.find("w2", t, c), Found::Pending { .. }));
        // The watch delivers a newer word before the GET answers.
        assert!(cache.changed("w2", Some(kept("w2", 9, "False"))));
        assert!(cache.fetched("w2", Ok(Some(kept("w2", 8, "True"))), c));
        assert_eq!(status(&cache.find("w2", t, c)).as_deref(), Some("False"));
        // A 404 reads as absent.
        assert!(matches!(cache.find("w3", t, c), Found::Fetch { .. }));
        assert!(cache.fetched("w3", Ok(None), c));
        assert_eq!(cache.find("w3", t, c), Found::Absent);
    }

    #[test]
    fn a_failed_get_is_retried_after_a_pause() {
        let (t, c) = now();
        let mut cache = NodeCache::default();
        cache.list_begins();
        cache.list_done();
        assert!(matches!(cache.find("w1", t, c), Found::Fetch { .. }));
        assert!(cache.fetched("w1", Err("HTTP 503".into()), c));
        assert!(
            matches!(cache.find("w1", t, c + Duration::from_secs(1)), Found::Failed { why, .. } if why == "HTTP 503")
        );
        assert!(matches!(
            cache.find("w1", t, c + FETCH_RETRY),
            Found::Fetch { .. }
        ));
        assert!(cache.fetched("w1", Ok(Some(kept("w1", 3, "True"))), c + FETCH_RETRY));
        assert_eq!(status(&cache.find("w1", t, c)).as_deref(), Some("True"));
    }

    /// A name registered while a list is under way may already be past
    /// its page: the end of the list GETs it, unless the list had it.
    #[test]
    fn a_name_registered_during_a_list_is_read_when_it_ends() {
        let (t, c) = now();
        let mut cache = NodeCache::default();
        cache.list_begins();
        cache.listed(kept("early", 1, "True"));
        assert!(matches!(cache.find("early", t, c), Found::Pending { .. }));
        assert!(matches!(cache.find("later", t, c), Found::Pending { .. }));
        cache.listed(kept("later", 2, "True"));
        assert_eq!(cache.list_done(), vec!["early".to_string()]);
        assert_eq!(status(&cache.find("later", t, c)).as_deref(), Some("True"));
        assert!(matches!(cache.find("early", t, c), Found::Pending { .. }));
        assert!(cache.fetched("early", Ok(Some(kept("early", 1, "True"))), c));
        assert_eq!(status(&cache.find("early", t, c)).as_deref(), Some("True"));
    }

    /// A relist replaces what was kept: a Node deleted while the watch
    /// was down (no Delete event) goes.
    #[test]
    fn a_relist_drops_what_it_does_not_list() {
        let (t, c) = now();
        let mut cache = NodeCache::default();
        cache.find("a", t, c);
        cache.find("b", t, c);
        cache.list_begins();
        cache.listed(kept("a", 1, "True"));
        cache.listed(kept("b", 2, "True"));
        cache.list_done();
        assert_eq!(cache.kept(), 2);
        cache.list_begins();
        // Still read from the old list until the new one is complete.
        assert_eq!(status(&cache.find("b", t, c)).as_deref(), Some("True"));
        cache.listed(kept("a", 3, "False"));
        assert!(cache.list_done().is_empty());
        assert_eq!(cache.find("b", t, c), Found::Absent);
        assert_eq!(status(&cache.find("a", t, c)).as_deref(), Some("False"));
    }

    #[test]
    fn the_cap_and_the_resync_bound_it() {
        let (t, c) = now();
        let mut cache = NodeCache::with_cap(3);
        for n in ["a", "b", "c"] {
            assert!(matches!(cache.find(n, t, c), Found::Pending { .. }));
        }
        assert_eq!(cache.find("d", t, c), Found::Full(3));
        cache.retain(&["a".to_string()].into_iter().collect());
        assert_eq!(cache.registered(), 1);
        assert!(matches!(cache.find("d", t, c), Found::Pending { .. }));
    }
}
