//! The fault proxy: what the tests need from an API server that the real
//! kube-apiserver (scripts/control-plane.sh, tests/support/cluster.rs) will
//! not do on demand — scripted answers, hangs, slow bodies, resets, refused
//! connections, hostile content and certificates refused by serial — in a
//! loopback proxy in front of it that keeps the caller's identity
//! (docs/developer/test-api.md).

pub mod kubeconfig;
pub mod proxy;

pub use proxy::{
    status_body, token_credential, ClientCert, FaultProxy, Faults, ProxyError, RequestRecord,
    Scripted, TlsError,
};
