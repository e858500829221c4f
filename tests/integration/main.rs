//! The integration tier's tests that may run beside each other, one binary
//! (scripts/run-tests.py, tests/tiers.toml): the real kernel, private
//! containerds, real agents and `check` over sockets, as root. The floods,
//! faults, sandboxes and timing-sensitive tests stay binaries of their own,
//! run alone (tests/tiers.toml's `alone`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;

mod check_desired;
mod check_machines;
mod check_nodes;
mod check_pool;
mod check_tls;
mod check_wait;
mod cri_live;
mod docs_examples;
mod gate_agents;
mod gvisor_e2e;
mod hostile_host;
mod identities;
mod metrics;
mod node_condition;
mod node_runtime;
mod pod_userns;
mod polling;
mod serve_tls;
mod userns_kernel;
