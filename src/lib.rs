//! sandbox-readiness: observe what a Talos worker really has in effect for
//! user namespaces and gVisor, evaluate it against a desired state, and serve
//! or print the result.
//!
//! Data flows one way: [`observe`] → [`report`] → [`evaluate`] → [`agent`]
//! (serve) / [`probe`] and [`output`] (print) / [`fleet`] (ask many agents).
//! The library never parses flags, picks an exit code or exits the process:
//! that is the binary's CLI layer.

pub mod agent;
pub mod evaluate;
pub mod fleet;
pub mod host;
pub mod observe;
pub mod output;
pub mod probe;
pub mod proto;
pub mod report;
pub mod summary;
pub mod text;
pub mod tls;
