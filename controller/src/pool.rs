//! The pool's desired state, from the machine config a node booted with:
//! the Machine's `spec.bootstrap.dataSecretName` Secret (key `value`, as
//! the bootstrap provider writes it), read through the desired-state
//! library's machine-config path. I/O around one pure call; the Secret's
//! content is never logged (it is a whole machine config: tokens, CA keys).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use sandbox_readiness::proto::v1::DesiredState;

/// The data key of a bootstrap-data Secret (Cluster API's contract:
/// `BootstrapDataSecret` key `value`, format in key `format`).
pub const SECRET_KEY: &str = "value";

/// After a failed read, the next try waits this long.
const RETRY: Duration = Duration::from_secs(5);

/// The pool's desired state for one bootstrap-data Secret: `Known`,
/// `Unreadable` (the Secret is gone or its machine config is unreadable:
/// one line) or `NotYetKnown` (an API error: try again later) — the node
/// crate reader's type, which judges the Node against it.
pub use sandbox_readiness::nodestatus::read::Pool;

enum Entry {
    Done(Pool),
    RetryAt(Instant),
}

/// Bootstrap-data Secrets are written once per Machine and never changed,
/// so each is read once (the cache entry goes with its Machine).
#[derive(Default)]
pub struct Cache {
    entries: HashMap<(String, String), Entry>,
}

/// The machine config → desired state step of the desired-state library
/// (its errors quote nothing of the text, so they may be shown).
fn from_machine_config(value: &[u8]) -> Result<DesiredState, String> {
    let text = std::str::from_utf8(value)
        .map_err(|_| "the machine config is not UTF-8 text".to_string())?;
    sandbox_readiness::desired::parse_pool(text, "machine config", None)
        .map(|p| p.desired())
        .map_err(|e| e.to_string())
}

impl Cache {
    pub async fn get(&mut self, mgmt: &Client, namespace: &str, name: &str) -> Pool {
        let key = (namespace.to_string(), name.to_string());
        match self.entries.get(&key) {
            Some(Entry::Done(p)) => return p.clone(),
            Some(Entry::RetryAt(t)) if Instant::now() < *t => return Pool::NotYetKnown,
            _ => {}
        }
        let api: Api<Secret> = Api::namespaced(mgmt.clone(), namespace);
        let pool = match crate::run::timed(api.get_opt(name)).await {
            Ok(Some(s)) => {
                match s
                    .data
                    .as_ref()
                    .and_then(|d| d.get(SECRET_KEY))
                    .map(|b| b.0.as_slice())
                {
                    None => Pool::Unreadable(format!(
                        "the bootstrap data Secret {namespace}/{name} has no key \"value\""
                    )),
                    Some(v) => match from_machine_config(v) {
                        Ok(d) => Pool::Known(d),
                        Err(e) => Pool::Unreadable(format!(
                            "the bootstrap data Secret {namespace}/{name}: {e}"
                        )),
                    },
                }
            }
            Ok(None) => Pool::Unreadable(format!(
                "the bootstrap data Secret {namespace}/{name} does not exist"
            )),
            Err(e) => {
                tracing::warn!(secret = %format!("{namespace}/{name}"), error = %e, "reading a bootstrap data Secret failed");
                self.entries
                    .insert(key, Entry::RetryAt(Instant::now() + RETRY));
                return Pool::NotYetKnown;
            }
        };
        self.entries.insert(key, Entry::Done(pool.clone()));
        pool
    }

    /// Forgets the Secrets no Machine names any more.
    pub fn retain(&mut self, keep: impl Fn(&str, &str) -> bool) {
        self.entries.retain(|(ns, n), _| keep(ns, n));
    }
}
