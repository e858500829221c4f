//! The controller's tests that may run beside each other, one binary
//! (scripts/run-tests.py, tests/tiers.toml): its binary against management
//! and workload test API servers. The Lease, QPS and rollout tests, which
//! count writes and time, stay binaries of their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod deploy;
mod endpoints;
mod faults;
mod gate;
