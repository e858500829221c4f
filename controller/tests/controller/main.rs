//! The controller's tests that may run beside each other, one binary
//! (scripts/run-tests.py, tests/tiers.toml): its binary against one real
//! management cluster (Cluster API running) and one real workload cluster
//! the tests share, each in a namespace of its own, and clusters of a
//! test's own for outages. The Lease, QPS and rollout tests, which count
//! writes and time, stay binaries of their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod chart;
mod deploy;
mod endpoints;
mod faults;
mod gate;
mod hostile;
