//! The controller's one error type: what a reconcile can fail with (the
//! reconciler's `error_policy` retries it after a pause), and what stops
//! the controller at start. Lines carry no credential and no tenant text
//! beyond a name.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("writing Machine {machine}'s condition failed: {source}")]
    Write {
        machine: String,
        #[source]
        source: kube::Error,
    },
    #[error("re-reading Machine {machine} after a conflict failed: {source}")]
    Reread {
        machine: String,
        #[source]
        source: kube::Error,
    },
    #[error("Machine {0} kept changing under {1} guarded writes")]
    Conflicts(String, usize),
    #[error("the management cluster's {0} watch ended")]
    WatchEnded(&'static str),
}
