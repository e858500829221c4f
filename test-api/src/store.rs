//! The object store: every object of every served resource, one
//! resourceVersion counter for all writes (as etcd's revision), and a log of
//! changes that watches replay from a resourceVersion. Below the compaction
//! point the log is gone and a watch from there expires (410), as after an
//! etcd compaction. Write semantics follow kube-apiserver's generic registry
//! (k8s.io/apiserver `pkg/registry/generic/registry/store.go`) and the
//! strategies of Nodes (`pkg/registry/core/node/strategy.go`) and custom
//! resources (apiextensions-apiserver `pkg/registry/customresource/strategy.go`,
//! `status_strategy.go`), kubernetes v1.32.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::resources::{split_api_version, Registry, ResourceType};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{self, ApiError};

/// Where an object lives: group + plural identify the resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, kept for watches.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: EventType,
    pub key: ObjKey,
    pub obj: Arc<Value>,
    /// The object before the change (for MODIFIED and DELETED): a watch with a
    /// selector turns a change that leaves the selection into DELETED.
    pub prev: Option<Arc<Value>>,
}

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// The main resource: status is kept from the stored object when the kind
    /// has a status subresource.
    Main,
    /// The `status` subresource: only status changes (Nodes: spec kept, metadata may change).
    Status,
    /// The test itself, no subresource rules: spec and status both change.
    Root,
}

/// Admission and validation run between the strategy and the commit, on the
/// final object (old is None on create).
pub type Check<'a> = &'a mut dyn FnMut(Option<&Value>, &mut Value) -> Result<(), ApiError>;

/// Past this many changes kept for watches, the oldest half is compacted away
/// (etcd's watch cache is bounded the same way).
const LOG_LIMIT: usize = 200_000;

pub struct Store {
    registry: Arc<Registry>,
    rv: u64,
    compacted: u64,
    objects: BTreeMap<ObjKey, Value>,
    log: VecDeque<Change>,
    notify: watch::Sender<u64>,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn new_uid() -> String {
    let a = fastrand::u64(..);
    let b = fastrand::u64(..);
    // A version-4 UUID layout.
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    obj.get_mut("metadata").and_then(Value::as_object_mut)
}

fn set_meta(obj: &mut Value, field: &str, v: Value) {
    if let Some(m) = meta_mut(obj) {
        m.insert(field.to_string(), v);
    }
}

fn remove_meta(obj: &mut Value, field: &str) {
    if let Some(m) = meta_mut(obj) {
        m.remove(field);
    }
}

/// The object without the parts a generation does not count (metadata, and
/// status when it is a subresource).
fn spec_part(obj: &Value, status_sub: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if status_sub {
            m.remove("status");
        }
    }
    o
}

fn without_rv(obj: &Value) -> Value {
    let mut o = obj.clone();
    remove_meta(&mut o, "resourceVersion");
    o
}

fn has_finalizers(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// The object as served at `version`.
pub fn at_version(rt: &ResourceType, version: &str, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version(version)));
        m.insert("kind".into(), json!(rt.kind));
    }
    o
}

impl Store {
    pub fn new(registry: Arc<Registry>) -> Store {
        let (notify, _) = watch::channel(1);
        Store {
            registry,
            rv: 1,
            compacted: 0,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            notify,
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The current resourceVersion (of the last write).
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// ResourceVersions at or below this one are gone for watches.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// A receiver that changes on every write (watches wait on it).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// Compacts at the current resourceVersion: a watch from an older one
    /// gets a 410 Expired.
    pub fn compact(&mut self) {
        self.compact_to(self.rv);
    }

    fn compact_to(&mut self, rv: u64) {
        self.compacted = self.compacted.max(rv);
        while self.log.front().is_some_and(|c| c.rv <= self.compacted) {
            self.log.pop_front();
        }
    }

    fn record(&mut self, kind: EventType, key: ObjKey, obj: &Value, prev: Option<Value>) {
        self.log.push_back(Change {
            rv: self.rv,
            kind,
            key,
            obj: Arc::new(obj.clone()),
            prev: prev.map(Arc::new),
        });
        if self.log.len() > LOG_LIMIT {
            let cut = self.log[LOG_LIMIT / 2].rv;
            self.compact_to(cut);
        }
        self.notify.send_replace(self.rv);
    }

    /// Changes after `rv` (in order), or Err(oldest kept) when `rv` is
    /// older than the compaction point.
    pub fn changes_since(&self, rv: u64) -> Result<Vec<Change>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let start = self.log.partition_point(|c| c.rv <= rv);
        Ok(self.log.range(start..).cloned().collect())
    }

    fn key(rt: &ResourceType, namespace: &str, name: &str) -> ObjKey {
        ObjKey {
            group: rt.group.clone(),
            plural: rt.plural.clone(),
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    pub fn get_at(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&Self::key(rt, namespace, name))
    }

    /// Objects of `rt` (in `namespace`, or all namespaces when None) that the
    /// selectors select, and the list's resourceVersion.
    pub fn list_at(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<&Value>, u64) {
        let items = self
            .objects
            .iter()
            .filter(|(k, _)| k.group == rt.group && k.plural == rt.plural)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, v)| v)
            .filter(|v| labels.matches(v) && fields.matches(v))
            .collect();
        (items, self.rv)
    }

    /// Creates an object of `rt` in `namespace` ("" for cluster-scoped).
    /// `keep_status`: the test seeds status directly; over HTTP a custom
    /// resource's status is dropped on create as its strategy does.
    pub fn create_at(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut obj: Value,
        keep_status: bool,
        check: Check<'_>,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(status::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            let Some(prefix) = meta_str(&obj, "generateName").filter(|p| !p.is_empty()) else {
                return Err(status::invalid(
                    &rt.group,
                    &rt.kind,
                    "",
                    "metadata.name",
                    "\"\"",
                    "name or generateName is required",
                ));
            };
            let suffix: String = (0..5)
                .map(|_| {
                    let c = b"bcdfghjklmnpqrstvwxz2456789";
                    char::from(c[fastrand::usize(..c.len())])
                })
                .collect();
            name = format!("{prefix}{suffix}");
        }
        let body_ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        if rt.namespaced {
            if !body_ns.is_empty() && body_ns != namespace {
                return Err(status::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            if namespace.is_empty() {
                return Err(status::bad_request(
                    "a namespace is required for a namespaced resource",
                ));
            }
        }
        let key = Self::key(rt, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(status::already_exists(&rt.group, &rt.plural, &name));
        }
        let version =
            split_api_version(obj.get("apiVersion").and_then(Value::as_str).unwrap_or("")).1;
        let version = if rt.serves(version) {
            version.to_string()
        } else {
            rt.preferred_version().to_string()
        };
        obj = at_version(rt, &version, &obj);
        set_meta(&mut obj, "name", json!(name));
        if rt.namespaced {
            set_meta(&mut obj, "namespace", json!(namespace));
        } else {
            remove_meta(&mut obj, "namespace");
        }
        set_meta(&mut obj, "uid", json!(new_uid()));
        set_meta(&mut obj, "creationTimestamp", json!(now_rfc3339()));
        remove_meta(&mut obj, "deletionTimestamp");
        remove_meta(&mut obj, "resourceVersion");
        if rt.crd {
            set_meta(&mut obj, "generation", json!(1));
            if rt.status_subresource && !keep_status {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        check(None, &mut obj)?;
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        self.objects.insert(key.clone(), obj.clone());
        self.record(EventType::Added, key, &obj, None);
        Ok(obj)
    }

    /// Replaces an object (PUT, and the end of every PATCH).
    pub fn update_at(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        new: Value,
        mode: UpdateMode,
        check: Check<'_>,
    ) -> Result<Value, ApiError> {
        let key = Self::key(rt, namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(status::not_found(&rt.group, &rt.plural, name));
        };
        if !new.is_object() {
            return Err(status::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        match meta_str(&new, "name") {
            Some(n) if n != name => {
                return Err(status::bad_request(&format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )))
            }
            _ => {}
        }
        if rt.namespaced {
            if let Some(ns) =
                meta_str(&new, "namespace").filter(|n| !n.is_empty() && *n != namespace)
            {
                return Err(status::bad_request(&format!(
                    "the namespace of the object ({ns}) does not match the namespace on the URL ({namespace})"
                )));
            }
        }
        match meta_str(&new, "resourceVersion").filter(|r| !r.is_empty()) {
            Some(rv) if Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(status::conflict(&rt.group, &rt.plural, name));
            }
            None if !rt.unconditional_update && mode != UpdateMode::Root => {
                return Err(status::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    "metadata.resourceVersion",
                    "0x0",
                    "must be specified for an update",
                ));
            }
            _ => {}
        }
        let version =
            split_api_version(old.get("apiVersion").and_then(Value::as_str).unwrap_or(""))
                .1
                .to_string();
        let mut fin = match (mode, rt.status_subresource) {
            (UpdateMode::Main, true) => {
                let mut f = new;
                if let Some(m) = f.as_object_mut() {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                f
            }
            (UpdateMode::Status, true) if rt.crd => {
                let mut f = old.clone();
                if let Some(m) = f.as_object_mut() {
                    match new.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                f
            }
            (UpdateMode::Status, true) => {
                let mut f = new;
                if let Some(m) = f.as_object_mut() {
                    match old.get("spec") {
                        Some(s) => m.insert("spec".into(), s.clone()),
                        None => m.remove("spec"),
                    };
                }
                f
            }
            _ => new,
        };
        fin = at_version(rt, &version, &fin);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match meta(&old).and_then(|m| m.get(field)) {
                Some(v) => set_meta(&mut fin, field, v.clone()),
                None => remove_meta(&mut fin, field),
            }
        }
        if rt.crd {
            let gen = meta(&old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let changed =
                spec_part(&old, rt.status_subresource) != spec_part(&fin, rt.status_subresource);
            set_meta(
                &mut fin,
                "generation",
                json!(if changed { gen + 1 } else { gen }),
            );
        }
        set_meta(
            &mut fin,
            "resourceVersion",
            old["metadata"]["resourceVersion"].clone(),
        );
        check(Some(&old), &mut fin)?;
        if without_rv(&fin) == without_rv(&old) {
            // kube-apiserver skips the write of an unchanged object: no new
            // resourceVersion, no watch event.
            return Ok(old);
        }
        self.rv += 1;
        set_meta(&mut fin, "resourceVersion", json!(self.rv.to_string()));
        if meta(&fin).is_some_and(|m| m.contains_key("deletionTimestamp")) && !has_finalizers(&fin)
        {
            self.objects.remove(&key);
            self.record(EventType::Deleted, key, &fin, Some(old));
            return Ok(fin);
        }
        self.objects.insert(key.clone(), fin.clone());
        self.record(EventType::Modified, key, &fin, Some(old));
        Ok(fin)
    }

    /// Deletes (or, with finalizers, marks for deletion) an object.
    /// `precondition`: (uid, resourceVersion) from DeleteOptions.
    pub fn delete_at(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<Value, ApiError> {
        let key = Self::key(rt, namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(status::not_found(&rt.group, &rt.plural, name));
        };
        if let Some(u) = uid.filter(|u| Some(*u) != meta_str(&old, "uid")) {
            return Err(status::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {u}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(r) = resource_version.filter(|r| Some(*r) != meta_str(&old, "resourceVersion"))
        {
            return Err(status::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        self.rv += 1;
        let mut obj = old.clone();
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        if has_finalizers(&old) {
            if meta(&old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                self.rv -= 1;
                return Ok(old);
            }
            set_meta(&mut obj, "deletionTimestamp", json!(now_rfc3339()));
            self.objects.insert(key.clone(), obj.clone());
            self.record(EventType::Modified, key, &obj, Some(old));
            return Ok(obj);
        }
        self.objects.remove(&key);
        self.record(EventType::Deleted, key, &obj, Some(old));
        Ok(obj)
    }

    fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceType, ApiError> {
        self.registry
            .by_kind(api_version, kind)
            .cloned()
            .ok_or_else(|| {
                status::bad_request(&format!(
                    "no kind {kind:?} is registered for version {api_version:?}"
                ))
            })
    }

    fn ident(obj: &Value) -> (String, String, String, String) {
        let s = |v: Option<&str>| v.unwrap_or("").to_string();
        (
            s(obj.get("apiVersion").and_then(Value::as_str)),
            s(obj.get("kind").and_then(Value::as_str)),
            s(meta_str(obj, "namespace")),
            s(meta_str(obj, "name")),
        )
    }

    /// Creates `obj` as the test (no authorization, status kept).
    pub fn create(&mut self, obj: Value) -> Result<Value, ApiError> {
        let (av, kind, ns, _) = Self::ident(&obj);
        let rt = self.resolve(&av, &kind)?;
        let ns = if rt.namespaced && ns.is_empty() {
            "default".to_string()
        } else {
            ns
        };
        self.create_at(&rt, &ns, obj, true, &mut |_, _| Ok(()))
    }

    /// The stored object, at the version asked for.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let rt = self.registry.by_kind(api_version, kind)?;
        let version = split_api_version(api_version).1;
        self.get_at(rt, namespace, name)
            .map(|o| at_version(rt, version, o))
    }

    /// Replaces `obj` as the test: spec and status both change; a
    /// `metadata.resourceVersion` in `obj` is a precondition.
    pub fn put(&mut self, obj: Value) -> Result<Value, ApiError> {
        let (av, kind, ns, name) = Self::ident(&obj);
        let rt = self.resolve(&av, &kind)?;
        self.update_at(&rt, &ns, &name, obj, UpdateMode::Root, &mut |_, _| Ok(()))
    }

    pub fn delete(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let rt = self.resolve(api_version, kind)?;
        self.delete_at(&rt, namespace, name, None, None)
    }

    /// Every stored object of a kind (all namespaces), at the version asked for.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let Some(rt) = self.registry.by_kind(api_version, kind) else {
            return Vec::new();
        };
        let version = split_api_version(api_version).1;
        let (items, _) = self.list_at(
            rt,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        items
            .into_iter()
            .map(|o| at_version(rt, version, o))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::CrdSet;

    fn store() -> Store {
        let crds = CrdSet::upstream_shared().unwrap();
        Store::new(Arc::new(Registry::new(crds, None)))
    }

    fn machine(name: &str) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"clusterName": "c1"}, "status": {"phase": "Pending"}})
    }

    #[test]
    fn one_counter_for_every_write_and_no_write_for_no_change() {
        let mut s = store();
        let a = s
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}))
            .unwrap();
        let b = s.create(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "a", "namespace": "kube-node-lease"}})).unwrap();
        let rv = |o: &Value| {
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        assert_eq!(rv(&b), rv(&a) + 1);
        assert_eq!(s.resource_version(), rv(&b));
        let same = s.put(a.clone()).unwrap();
        assert_eq!(rv(&same), rv(&a), "an unchanged object was written");
        assert_eq!(s.resource_version(), rv(&b));
        let mut stale = a.clone();
        stale["metadata"]["labels"] = json!({"x": "y"});
        s.put(stale.clone()).unwrap();
        let e = s.put(stale).unwrap_err();
        assert_eq!(e.code, 409);
    }

    #[test]
    fn generation_counts_spec_changes_of_custom_resources() {
        let mut s = store();
        let m = s.create(machine("m")).unwrap();
        assert_eq!(m["metadata"]["generation"], 1);
        assert_eq!(m["status"]["phase"], "Pending", "a test seeds status");
        let mut m2 = m.clone();
        m2["status"]["phase"] = json!("Running");
        m2["metadata"]["labels"] = json!({"a": "b"});
        let m2 = s.put(m2).unwrap();
        assert_eq!(m2["metadata"]["generation"], 1);
        let mut m3 = m2.clone();
        m3["spec"]["clusterName"] = json!("c2");
        assert_eq!(s.put(m3).unwrap()["metadata"]["generation"], 2);
    }

    #[test]
    fn finalizers_hold_a_deletion() {
        let mut s = store();
        let mut m = machine("m");
        m["metadata"]["finalizers"] = json!(["example.com/f"]);
        s.create(m).unwrap();
        let d = s
            .delete("cluster.x-k8s.io/v1beta2", "Machine", "default", "m")
            .unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string());
        let mut held = s
            .get("cluster.x-k8s.io/v1beta2", "Machine", "default", "m")
            .unwrap();
        held["metadata"]["finalizers"] = json!([]);
        s.put(held).unwrap();
        assert!(s
            .get("cluster.x-k8s.io/v1beta2", "Machine", "default", "m")
            .is_none());
        let kinds: Vec<EventType> = s.changes_since(0).unwrap().iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
    }

    #[test]
    fn compaction_expires_older_resource_versions() {
        let mut s = store();
        s.create(machine("a")).unwrap();
        let before = s.resource_version();
        s.create(machine("b")).unwrap();
        assert_eq!(s.changes_since(before).unwrap().len(), 1);
        s.compact();
        assert_eq!(s.changes_since(before).err(), Some(s.resource_version()));
        assert!(s.changes_since(s.resource_version()).unwrap().is_empty());
    }

    #[test]
    fn bad_writes_change_nothing() {
        let mut s = store();
        let rv = s.resource_version();
        assert_eq!(
            s.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {}}))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            s.create(json!({"apiVersion": "v9", "kind": "Nope"}))
                .unwrap_err()
                .code,
            400
        );
        s.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}))
            .unwrap();
        let e = s
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}))
            .unwrap_err();
        assert_eq!(
            (e.code, e.body["message"].as_str().unwrap()),
            (409, "nodes \"a\" already exists")
        );
        assert_eq!(s.resource_version(), rv + 1);
    }
}
