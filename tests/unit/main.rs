//! The unit tier's integration-style tests of the node crate, one binary
//! (scripts/run-tests.py, tests/tiers.toml): no root, nothing on the host
//! changed. Each module is one concept; they share nothing but the build.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docs;
mod fuzz_parsers;
mod generated_proto;
mod gvisor_fixtures;
#[path = "../support/markdown.rs"]
mod markdown;
mod tls;
