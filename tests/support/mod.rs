//! Helpers shared by the integration tests (`mod support;` in a test file).

#![allow(dead_code)]

pub mod cluster;
pub mod containerd;
pub mod kubelet;
pub mod markdown;
pub mod playground;
pub mod testenv;
