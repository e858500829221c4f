//! A test API server: a stand-in for kube-apiserver that the Kubernetes-facing
//! code of sandbox-readiness is tested against, since no real one can run on
//! the test machines. It is held honest by real Kubernetes code: its patch
//! semantics are compared with `kubectl patch --local` (apimachinery's merge,
//! offline), and kubectl itself drives it as an operator would.

pub mod authn;
pub mod authz;
pub mod discovery;
pub mod faults;
pub mod identity;
pub mod kubeconfig;
pub mod patch;
pub mod proxy;
pub mod resources;
pub mod routes;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;

pub use authz::{admit_node_restriction, authorize, Decision, Rbac};
pub use faults::{Faults, Scripted};
pub use identity::{Attributes, NodeAuthzMode, Op, User};
pub use schema::{CrdSet, Invalid};
pub use server::{token_credential, Builder, RequestRecord, ServerError, TestApiServer};
pub use status::ApiError;
pub use store::Store;
pub use tls::ClientCert;
