//! sandbox-readiness: observe what a Talos worker really has in effect for
//! user namespaces and gVisor, evaluate it against a desired state, and serve
//! or print the result.
//!
//! Data flows one way: [`observe`] (raw facts, through [`hostio`]) →
//! [`report`] (one [`report::derive`] step computes every derived field) →
//! [`evaluate`] → [`agent`] (serve) / [`output`] (print) / [`fleet`] (ask
//! many agents). [`sysctl_name`] is the pure naming rule both observation
//! and evaluation use.

pub mod agent;
pub mod cli;
pub mod evaluate;
pub mod fleet;
pub mod host;
pub mod hostio;
pub mod observe;
pub mod output;
pub mod proto;
pub mod report;
pub mod sysctl_name;
pub mod tls;
