//! Generated protobuf and gRPC code.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// The agent's API, `sandbox_readiness.v1`.
pub mod v1 {
    tonic::include_proto!("sandbox_readiness.v1");
    include!(concat!(env!("OUT_DIR"), "/sandbox_readiness.v1.serde.rs"));

    /// Encoded `FileDescriptorSet` of the API, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/readiness_descriptor.bin"));
}

/// The subset of the Kubernetes CRI API the agent calls, `runtime.v1`.
pub mod cri {
    tonic::include_proto!("runtime.v1");
}
