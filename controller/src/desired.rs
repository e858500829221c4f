//! The pool's desired sysctls, from the CABPT objects the Machine was made
//! from, without reading any bootstrap-data Secret (a whole Talos machine
//! config: CA keys, tokens).
//!
//! A Machine names its `TalosConfig` (`spec.bootstrap.configRef`); Cluster
//! API's MachineSet controller cloned that TalosConfig from the
//! MachineDeployment's `TalosConfigTemplate` and says so in the annotations
//! `cluster.x-k8s.io/cloned-from-name` and `…/cloned-from-groupkind`. So:
//! - TalosConfigs are watched **metadata only** (name, annotations,
//!   generation, resourceVersion): never their `spec`;
//! - TalosConfigTemplates — a handful per pool — are watched and **reduced
//!   at once** to their desired sysctls by the desired-state library (the
//!   one `check --desired-from` uses); `spec.data` may be a whole machine
//!   config with CA keys and is never kept;
//! - a TalosConfig with no template (made by hand), whose template is gone,
//!   or **edited after cloning** (`metadata.generation` past 1: the API
//!   server bumps it on every spec change, CABPT writes only status) is
//!   read in full once per resourceVersion, reduced the same way, and only
//!   the reduction is kept.
//!
//! Where CABPT's rendered bootstrap data can still differ from this: a
//! generated config (`generateType` not `none`) gets CABPT's machinery
//! defaults, which set no sysctl; and a document CABPT's machinery version
//! refuses renders no bootstrap data at all (the Machine never gets a
//! Node). The Talos oracle tests compare the desired-state library with
//! machinery on both.
//!
//! The API version of CABPT's kinds is read from their CRD's Cluster API
//! contract label (`cluster.x-k8s.io/v1beta1: v1alpha3`, the last version
//! listed), as Cluster API resolves references, never hard-coded.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind},
    core::PartialObjectMeta,
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, ResourceExt,
};
use serde_json::{json, Value};

use crate::machine::ConfigRef;

/// The pool's desired state for one Machine (the node crate reader's type).
pub use sandbox_readiness::nodestatus::read::Pool;

pub const GROUP: &str = "bootstrap.cluster.x-k8s.io";
pub const CONFIG_KIND: &str = "TalosConfig";
pub const TEMPLATE_KIND: &str = "TalosConfigTemplate";
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// The CRD labels naming the versions that serve a Cluster API contract,
/// newest contract first.
const CONTRACT_LABELS: [&str; 2] = ["cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"];

/// The served version of a CRD by its contract labels: the last of the
/// `_`-separated versions of the newest contract it declares. Pure.
pub fn contract_version(labels: &std::collections::BTreeMap<String, String>) -> Option<String> {
    CONTRACT_LABELS
        .iter()
        .find_map(|l| labels.get(*l))
        .and_then(|v| v.split('_').rfind(|s| !s.is_empty()))
        .map(str::to_string)
}

/// What a template or a TalosConfig reduces to: its desired sysctls, or
/// the desired-state library's one-line reason (which quotes nothing of
/// the text). Pure.
pub fn reduce(
    o: &Value,
    origin: &str,
) -> Result<sandbox_readiness::proto::v1::DesiredState, String> {
    let text = serde_json::to_string(o).map_err(|e| format!("{origin}: {e}"))?;
    sandbox_readiness::desired::parse_pool(&text, origin, None)
        .map(|p| p.desired())
        .map_err(|e| e.to_string())
}

/// Replaces a template's content with its reduction before the reflector
/// stores it: `data` becomes `{"sysctls": {name: value}}` or
/// `{"error": "…"}`; annotations and managed fields go.
fn reduce_in_place(o: &mut DynamicObject) {
    let origin = format!(
        "{TEMPLATE_KIND} {}/{}",
        o.namespace().unwrap_or_default(),
        o.name_any()
    );
    let whole = serde_json::to_value(&*o).unwrap_or(Value::Null);
    o.data = match reduce(&whole, &origin) {
        Ok(d) => {
            json!({"sysctls": d.sysctls.iter().map(|s| (s.name.clone(), json!(s.value))).collect::<serde_json::Map<_, _>>()})
        }
        Err(e) => json!({"error": e}),
    };
    o.metadata.annotations = None;
    o.metadata.managed_fields = None;
    o.metadata.labels = None;
    o.metadata.owner_references = None;
}

/// A stored reduction back as a [`Pool`].
fn pool_of(data: &Value) -> Pool {
    if let Some(e) = data.get("error").and_then(Value::as_str) {
        return Pool::Unreadable(e.to_string());
    }
    let sysctls = data
        .get("sysctls")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| sandbox_readiness::proto::v1::SysctlExpectation {
                    name: k.clone(),
                    value: v.as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Pool::Known(sandbox_readiness::proto::v1::DesiredState {
        sysctls,
        ..Default::default()
    })
}

/// How a TalosConfig's desired state is found. Pure over its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The template it was cloned from, unedited since.
    Template(String),
    /// Its own spec, read in full.
    Own,
}

pub fn source(meta: &kube::core::ObjectMeta) -> Source {
    let a = meta.annotations.as_ref();
    let get = |k: &str| a.and_then(|a| a.get(k)).map(String::as_str);
    let cloned = get(CLONED_FROM_GROUPKIND) == Some(&format!("{TEMPLATE_KIND}.{GROUP}")[..]);
    match get(CLONED_FROM_NAME) {
        Some(t) if cloned && !t.is_empty() && meta.generation.unwrap_or(1) <= 1 => {
            Source::Template(t.to_string())
        }
        _ => Source::Own,
    }
}

struct Watched {
    config_ar: ApiResource,
    configs: Store<PartialObjectMeta<DynamicObject>>,
    templates: Store<DynamicObject>,
}

/// The desired-state cache of the controller.
pub struct Desired {
    /// `None` until CABPT's CRDs were read; `Err`: they cannot be (why).
    watched: Mutex<Option<Result<Arc<Watched>, String>>>,
    /// TalosConfigs read in full: (namespace, name) → (resourceVersion, reduction).
    own: Mutex<HashMap<(String, String), (String, Pool)>>,
}

impl Default for Desired {
    fn default() -> Self {
        Desired {
            watched: Mutex::new(None),
            own: Mutex::new(HashMap::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the contract version of CABPT's kinds from their CRD.
async fn served_version(mgmt: &Client) -> Result<String, String> {
    let crds: Api<CustomResourceDefinition> = Api::all(mgmt.clone());
    let name = format!("talosconfigs.{GROUP}");
    match crate::qps::timed(crds.get_opt(&name)).await {
        Ok(Some(crd)) => contract_version(crd.labels())
            .ok_or_else(|| format!("CRD {name} carries no cluster.x-k8s.io contract label")),
        Ok(None) => Err(format!(
            "CRD {name} is not installed (no Cluster API bootstrap provider for Talos)"
        )),
        Err(e) => Err(format!("CRD {name} cannot be read: {e}")),
    }
}

/// The first retry of the TalosConfig CRD's read, doubled up to
/// [`RETRY_MAX`]: a CRD installed after the controller (CABPT after it), RBAC
/// bound late, a 5xx or a 429 are all passing.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two reads of the CRD: a pool waits at most this
/// long after CABPT's CRDs appear.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

impl Desired {
    /// Resolves CABPT's version and starts the two watches, reading the CRD
    /// again with backoff (1 s doubling to 30 s) until it can: a CRD that
    /// cannot be read leaves every pool `NotYetKnown` meanwhile, one that
    /// does not exist makes it `Unreadable` until it does. `waiting` is told
    /// why it waits (None once the watches run): /readyz and a metric show it.
    pub async fn start(
        &self,
        mgmt: &Client,
        on_change: impl Fn() + Send + Sync + 'static,
        waiting: impl Fn(Option<&str>),
    ) {
        let mut delay = RETRY_FIRST;
        let mut last: Option<String> = None;
        let version = loop {
            match served_version(mgmt).await {
                Ok(v) => break v,
                Err(e) => {
                    if last.as_deref() != Some(e.as_str()) {
                        tracing::warn!(
                            "{e}; reading it again within {}",
                            humantime::format_duration(RETRY_MAX)
                        );
                    }
                    *lock(&self.watched) = e.contains("not installed").then(|| Err(e.clone()));
                    waiting(Some(&e));
                    last = Some(e);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        };
        if last.is_some() {
            tracing::info!("the TalosConfig CRD is readable now; pools are read");
        }
        waiting(None);
        let ar = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, &version, kind), plural)
        };
        let config_ar = ar(CONFIG_KIND, "talosconfigs");
        let template_ar = ar(TEMPLATE_KIND, "talosconfigtemplates");
        let on_change = Arc::new(on_change);
        // Metadata only: a TalosConfig's spec may hold a whole machine config.
        let w = reflector::store::Writer::new(config_ar.clone());
        let configs = w.as_reader();
        let stream = watcher(
            Api::<PartialObjectMeta<DynamicObject>>::all_with(mgmt.clone(), &config_ar),
            watcher::Config::default(),
        )
        .modify(|m| {
            m.metadata.managed_fields = None;
            if let Some(a) = m.metadata.annotations.as_mut() {
                a.retain(|k, _| k == CLONED_FROM_NAME || k == CLONED_FROM_GROUPKIND);
            }
        })
        .reflect(w)
        .backoff(crate::workload::reconnect_backoff());
        tokio::spawn(drive(stream, "TalosConfigs", None));
        let w = reflector::store::Writer::new(template_ar.clone());
        let templates = w.as_reader();
        let stream = watcher(
            Api::<DynamicObject>::all_with(mgmt.clone(), &template_ar),
            watcher::Config::default(),
        )
        .modify(reduce_in_place)
        .reflect(w)
        .backoff(crate::workload::reconnect_backoff());
        tokio::spawn(drive(stream, "TalosConfigTemplates", Some(on_change)));
        *lock(&self.watched) = Some(Ok(Arc::new(Watched {
            config_ar,
            configs,
            templates,
        })));
    }

    pub fn started(&self) -> bool {
        lock(&self.watched).is_some()
    }

    /// The desired state for a Machine's bootstrap config.
    pub async fn pool(&self, mgmt: &Client, namespace: &str, r: Option<&ConfigRef<'_>>) -> Pool {
        let Some(r) = r else {
            return Pool::Unreadable(
                "the Machine names no bootstrap config (spec.bootstrap.configRef)".into(),
            );
        };
        if r.kind != CONFIG_KIND || r.api_group != GROUP {
            return Pool::Unreadable(format!(
                "the Machine's bootstrap config is a {}.{}, not a {CONFIG_KIND}.{GROUP}: its sysctls cannot be read",
                r.kind, r.api_group
            ));
        }
        let w = match lock(&self.watched).clone() {
            Some(Ok(w)) => w,
            Some(Err(e)) => return Pool::Unreadable(e),
            None => return Pool::NotYetKnown,
        };
        let Some(meta) = w
            .configs
            .get(&ObjectRef::new_with(r.name, w.config_ar.clone()).within(namespace))
        else {
            // Not listed yet, or CABPT has not made it yet: look again.
            return Pool::NotYetKnown;
        };
        if let Source::Template(t) = source(&meta.metadata) {
            let template_ar = ApiResource {
                kind: TEMPLATE_KIND.into(),
                plural: "talosconfigtemplates".into(),
                ..w.config_ar.clone()
            };
            if let Some(t) = w
                .templates
                .get(&ObjectRef::new_with(&t, template_ar).within(namespace))
            {
                return pool_of(&t.data);
            }
        }
        self.own(mgmt, &w, namespace, r.name, meta.resource_version())
            .await
    }

    /// A TalosConfig read in full, reduced, and only the reduction kept
    /// (per resourceVersion).
    async fn own(
        &self,
        mgmt: &Client,
        w: &Watched,
        namespace: &str,
        name: &str,
        rv: Option<String>,
    ) -> Pool {
        let key = (namespace.to_string(), name.to_string());
        if let (Some(rv), Some((had, p))) = (&rv, lock(&self.own).get(&key)) {
            if had == rv {
                return p.clone();
            }
        }
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), namespace, &w.config_ar);
        let pool = match crate::qps::timed(api.get_opt(name)).await {
            Ok(Some(o)) => {
                let whole = serde_json::to_value(&o).unwrap_or(Value::Null);
                match reduce(&whole, &format!("{CONFIG_KIND} {namespace}/{name}")) {
                    Ok(d) => Pool::Known(d),
                    Err(e) => Pool::Unreadable(e),
                }
            }
            Ok(None) => return Pool::NotYetKnown,
            Err(e) => {
                tracing::warn!(talosconfig = %format!("{namespace}/{name}"), error = %e, "reading a TalosConfig failed");
                return Pool::NotYetKnown;
            }
        };
        let mut own = lock(&self.own);
        // Forget the TalosConfigs that are gone.
        own.retain(|(ns, n), _| {
            w.configs
                .get(&ObjectRef::new_with(n, w.config_ar.clone()).within(ns))
                .is_some()
        });
        if let Some(rv) = rv {
            own.insert(key, (rv, pool.clone()));
        }
        pool
    }
}

/// Drives a reflector stream, logging its failures once per episode and
/// telling `on_change` of every change after the first list.
async fn drive<T>(
    stream: impl futures_util::Stream<Item = Result<watcher::Event<T>, watcher::Error>>,
    what: &'static str,
    on_change: Option<Arc<dyn Fn() + Send + Sync>>,
) {
    let mut stream = std::pin::pin!(stream);
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => {
                if failing {
                    tracing::info!("the {what} watch resumed");
                    failing = false;
                }
                if matches!(
                    ev,
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
                ) {
                    if let Some(f) = &on_change {
                        f();
                    }
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "the {what} watch failed; retrying");
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn contract_versions() {
        let l = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert_eq!(
            contract_version(&l("cluster.x-k8s.io/v1beta1", "v1alpha3")).as_deref(),
            Some("v1alpha3")
        );
        assert_eq!(
            contract_version(&l("cluster.x-k8s.io/v1beta1", "v1alpha2_v1alpha3")).as_deref(),
            Some("v1alpha3")
        );
        let both = BTreeMap::from([
            (
                "cluster.x-k8s.io/v1beta1".to_string(),
                "v1alpha3".to_string(),
            ),
            (
                "cluster.x-k8s.io/v1beta2".to_string(),
                "v1beta1".to_string(),
            ),
        ]);
        assert_eq!(contract_version(&both).as_deref(), Some("v1beta1"));
        assert_eq!(contract_version(&BTreeMap::new()), None);
    }

    fn meta(annotations: &[(&str, &str)], generation: i64) -> kube::core::ObjectMeta {
        kube::core::ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            generation: Some(generation),
            ..Default::default()
        }
    }

    #[test]
    fn sources() {
        let gk = "TalosConfigTemplate.bootstrap.cluster.x-k8s.io";
        let cloned = [(CLONED_FROM_NAME, "pool-a"), (CLONED_FROM_GROUPKIND, gk)];
        assert_eq!(source(&meta(&cloned, 1)), Source::Template("pool-a".into()));
        // Edited after cloning: its own spec is what the node got.
        assert_eq!(source(&meta(&cloned, 2)), Source::Own);
        // Cloned from something else, or by hand.
        assert_eq!(
            source(&meta(
                &[(CLONED_FROM_NAME, "x"), (CLONED_FROM_GROUPKIND, "Other.g")],
                1
            )),
            Source::Own
        );
        assert_eq!(source(&meta(&[], 1)), Source::Own);
    }

    /// The stored reduction keeps the sysctls and nothing of the template's
    /// text (here a machine config with a CA key in `data`).
    #[test]
    fn a_template_is_reduced_before_it_is_stored() {
        let mut t: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
            "metadata": {"name": "pool-a", "namespace": "t1", "annotations": {"a": "b"}},
            "spec": {"template": {"spec": {"generateType": "none", "talosVersion": "v1.13",
                "data": "version: v1alpha1\nmachine:\n  type: worker\n  ca:\n    crt: Y3J0\n    key: U0VDUkVUS0VZ\n  sysctls:\n    user.max_user_namespaces: \"11255\"\ncluster: {}\n"}}}
        }))
        .unwrap();
        reduce_in_place(&mut t);
        let kept = serde_json::to_string(&t).unwrap();
        assert!(!kept.contains("U0VDUkVUS0VZ"), "{kept}");
        match pool_of(&t.data) {
            Pool::Known(d) => {
                assert_eq!(d.sysctls.len(), 1, "{d:?}");
                assert_eq!(
                    (d.sysctls[0].name.as_str(), d.sysctls[0].value.as_str()),
                    ("user.max_user_namespaces", "11255")
                );
            }
            p => panic!("{p:?}"),
        }
        let mut bad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
            "metadata": {"name": "bad", "namespace": "t1"},
            "spec": {"template": {"spec": {"generateType": "none", "data": "key: [unclosed SECRET"}}}
        }))
        .unwrap();
        reduce_in_place(&mut bad);
        match pool_of(&bad.data) {
            Pool::Unreadable(e) => assert!(!e.contains("SECRET"), "{e}"),
            p => panic!("{p:?}"),
        }
    }
}
