//! Generated protobuf and gRPC code, committed under `generated/`.
//!
//! The code is generated from `proto/` by `tests/generated_proto.rs` (run
//! `SR_REGENERATE_PROTO=1 cargo test --test generated_proto` after changing
//! a `.proto`), which also fails the unit tier when a committed file differs
//! from what the generators make now. Committed rather than generated in
//! build.rs so a plain build does not compile the protobuf compiler and the
//! code generators (protox, prost-build, tonic-build, pbjson-build and their
//! dependencies: about 46 s of CPU, a sixth of the README's first
//! `cargo run --release -- probe` on a fresh machine).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// The agent's API, `sandbox_readiness.v1`.
pub mod v1 {
    include!("generated/sandbox_readiness.v1.rs");
    include!("generated/sandbox_readiness.v1.serde.rs");

    /// Encoded `FileDescriptorSet` of the API, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("generated/readiness_descriptor.bin");
}

/// The subset of the Kubernetes CRI API the agent calls, `runtime.v1`.
pub mod cri {
    include!("generated/runtime.v1.rs");
}
