//! What the agent writes on its own Node, pure: the sandbox condition from a
//! verdict ([`condition`]), the per-handler labels ([`labels`]), the patch
//! bodies ([`patch`]) and the Node's name from a credential ([`identity`]).
//!
//! The I/O (the API server client) is in [`crate::kube`], the task that
//! writes in `agent::writer`. Written as Node Problem Detector writes its
//! conditions: a strategic merge patch of `status.conditions` on
//! `nodes/NAME/status`, merged by `type` so kubelet's conditions stay
//! (kubernetes/node-problem-detector
//! `pkg/exporters/k8sexporter/problemclient/problem_client.go`).

pub mod condition;
pub mod identity;
pub mod labels;
pub mod patch;

/// The prefix of every label and annotation the agent owns.
pub const PREFIX: &str = "sandbox-readiness.io/";

/// The default condition type (`--condition-type`; the controller's flag
/// has the same name and default).
pub const DEFAULT_CONDITION_TYPE: &str = "sandbox-readiness.io/SandboxReady";

/// The annotation listing the labels the agent set, so a restarted agent
/// knows which ones to remove (Talos keeps its own labels the same way:
/// siderolabs/talos `internal/app/machined/pkg/controllers/k8s/node_apply.go`,
/// annotation `talos.dev/owned-labels`).
pub const OWNED_LABELS_ANNOTATION: &str = "sandbox-readiness.io/owned-labels";

/// The annotation holding the desired state the node was judged against
/// (written and parsed by the desired-state library).
pub const DESIRED_ANNOTATION: &str = crate::desired::ANNOTATION;
