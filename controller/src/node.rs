//! What a workload cluster's Node says: its condition of the controller's
//! type and its `sandbox-readiness.io/desired` annotation, checked against
//! the pool's desired state with the desired-state library's one rule
//! ([`sandbox_readiness::desired::covers`]). Pure.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use sandbox_readiness::{
    desired::{covers, from_annotation, ANNOTATION},
    proto::v1::DesiredState,
};

use crate::condition::{DesiredCheck, NodeCondition, Status};

/// The Node's condition of type `ty`, if any (a malformed status reads as
/// `Unknown`: the Node says something the controller cannot take as True).
pub fn condition(n: &Node, ty: &str) -> Option<NodeCondition> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)?;
    let heartbeat = c
        .last_heartbeat_time
        .as_ref()
        .or(c.last_transition_time.as_ref())
        .map(|t| SystemTime::from(t.0));
    Some(NodeCondition {
        status: Status::parse(&c.status).unwrap_or(Status::Unknown),
        reason: c.reason.clone().unwrap_or_default(),
        message: c.message.clone().unwrap_or_default(),
        heartbeat,
    })
}

/// Whether the Node's annotation covers `pool` (the desired state read from
/// the machine config the node booted with).
pub fn desired_check(n: &Node, pool: &DesiredState) -> DesiredCheck {
    let Some(text) = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
    else {
        return DesiredCheck::NoAnnotation;
    };
    let node = match from_annotation(text) {
        Ok(d) => d,
        Err(e) => return DesiredCheck::Unreadable(e.to_string()),
    };
    match covers(&node, pool) {
        Ok(()) => DesiredCheck::Covered,
        Err(keys) => DesiredCheck::Uncovered(keys.iter().map(ToString::to_string).collect()),
    }
}
