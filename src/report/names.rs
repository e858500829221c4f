//! Names the observer and the derive step both use. Pure constants: the
//! observer imports them from here, never the other way round.

/// The gVisor runtime binary.
pub const RUNSC: &str = "runsc";
/// The containerd shim containerd derives from `io.containerd.runsc.v1`.
pub const RUNSC_SHIM: &str = "containerd-shim-runsc-v1";
/// The `runtime_type` of a gVisor handler.
pub const RUNSC_RUNTIME_TYPE: &str = "io.containerd.runsc.v1";

/// Precondition names, as reported in `Precondition::name`.
pub const PRECONDITION_MAX_USER_NAMESPACES: &str = "user.max_user_namespaces";
pub const PRECONDITION_PTRACE_SCOPE: &str = "kernel.yama.ptrace_scope";
pub const PRECONDITION_KVM: &str = "/dev/kvm";
