//! A test API server: a stand-in for kube-apiserver that the Kubernetes-facing
//! code of sandbox-readiness is tested against, since no real one can run on
//! the test machines. It is held honest by real Kubernetes code: its patch
//! semantics are compared with `kubectl patch --local` (apimachinery's merge,
//! offline), and kubectl itself drives it as an operator would.

pub mod identity;

pub use authz::{admit_node_restriction, authorize, Decision, Rbac};
pub use identity::{Attributes, NodeAuthzMode, Op, User};
pub use schema::{CrdSet, Invalid};
pub mod authz;
pub mod schema;
