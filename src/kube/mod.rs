//! A minimal Kubernetes client for the agent's own Node, over the HTTP and
//! TLS stack the agent already carries (kube-rs would cost ~4 MiB):
//! [`kubeconfig`] parses (pure), [`creds`] loads and notices rotations,
//! [`client`] makes the requests.

pub mod client;
pub mod creds;
pub mod kubeconfig;

pub use client::{Client, KubeError, NodeView};
pub use creds::CredError;
