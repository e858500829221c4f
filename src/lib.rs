//! sandbox-readiness: observe what a Talos worker really has in effect for
//! user namespaces and gVisor, evaluate it against a desired state, and serve
//! or print the result.
//!
//! Data flows one way: [`observe`] (raw facts, through [`hostio`]) →
//! [`report`] (one [`report::derive()`] step computes every derived field) →
//! [`evaluate`] → [`agent`] (serve) / [`probe`] and [`output`] (print) /
//! [`fleet`] (ask many agents); [`metrics`] renders a published report for
//! Prometheus, [`endpoints`] serves it (and the controller's health and
//! metrics endpoints). [`sysctl_name`] is the pure naming rule both
//! observation and evaluation use; [`text`] cleans what reaches a terminal.
//! [`init`] is PID 1's duty (fork, reap, forward signals) when the binary
//! starts as PID 1. The library never parses flags, picks an exit code or exits the process:
//! that is the binary's CLI layer.

pub mod agent;
#[doc(hidden)]
pub mod clidoc;
pub mod desired;
pub mod endpoints;
pub mod evaluate;
pub mod fleet;
pub mod host;
pub mod hostio;
pub mod init;
pub mod kube;
pub mod metrics;
pub mod nodestatus;
pub mod observe;
pub mod output;
pub mod probe;
pub mod proto;
pub mod report;
pub mod residency;
pub mod sysctl_name;
pub mod text;
pub mod tls;
