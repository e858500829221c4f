//! A test API server: a stand-in for kube-apiserver that the Kubernetes-facing
//! code of sandbox-readiness is tested against, since no real one can run on
//! the test machines. It is held honest by real Kubernetes code: its patch
//! semantics are compared with `kubectl patch --local` (apimachinery's merge,
//! offline), and kubectl itself drives it as an operator would.

pub mod authz;
pub mod identity;
pub mod schema;

pub use identity::{Attributes, NodeAuthzMode, Op, User};
