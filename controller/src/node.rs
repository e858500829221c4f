//! What a workload cluster's Node says: read by the node crate's reader
//! ([`sandbox_readiness::nodestatus::read::read`], the one `check
//! --from-node-conditions` uses), so the controller and `check` take a
//! Node the same way. Pure.

use k8s_openapi::api::core::v1::Node;
use sandbox_readiness::nodestatus::read;

/// The Node's condition of type `ty` and its `sandbox-readiness.io/desired`
/// annotation. A Node always serializes; `Null` (read as a Node without a
/// condition) only if that ever changed.
pub fn reading(n: &Node, ty: &str) -> read::Reading {
    let v = serde_json::to_value(n).unwrap_or(serde_json::Value::Null);
    read::read(&v, ty)
}
