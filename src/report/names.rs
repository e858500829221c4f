//! Names the observer and the derive step both use. Pure constants: the
//! observer imports them from here, never the other way round.

/// The gVisor runtime binary.
pub const RUNSC: &str = "runsc";
/// The containerd shim containerd derives from `io.containerd.runsc.v1`.
pub const RUNSC_SHIM: &str = "containerd-shim-runsc-v1";
/// The `runtime_type` of a gVisor handler.
pub const RUNSC_RUNTIME_TYPE: &str = "io.containerd.runsc.v1";

/// The start of a sandbox probe's message when it was skipped because
/// runsc cannot run where the agent runs (not because of the node): the
/// evaluation then lets the gVisor handlers' CRI canaries stand in.
pub const CANNOT_RUN_HERE: &str = "runsc cannot start a sandbox where the agent runs";

/// `CriRuntime.handlers_source` when the runtime filled `runtime_handlers`.
pub const SOURCE_RUNTIME_HANDLERS: &str = "runtime_handlers";
/// `CriRuntime.handlers_source` when the handlers were read from `info["config"]`.
pub const SOURCE_INFO_CONFIG: &str = "info.config";

/// How `CriRuntime.error` ends when the CRI socket does not exist at all:
/// no runtime on this machine (or not where it was looked for), rather than
/// a runtime that fails; shown as information, not as a failure.
pub const CRI_SOCKET_ABSENT: &str = "does not exist";

/// Whether `CriRuntime.error` says the socket does not exist.
pub fn cri_socket_absent(error: &str) -> bool {
    error.starts_with("CRI socket ") && error.ends_with(CRI_SOCKET_ABSENT)
}

/// Precondition names, as reported in `Precondition::name`.
pub const PRECONDITION_MAX_USER_NAMESPACES: &str = "user.max_user_namespaces";
pub const PRECONDITION_PTRACE_SCOPE: &str = "kernel.yama.ptrace_scope";
pub const PRECONDITION_KVM: &str = "/dev/kvm";
