//! The one way the agent touches host files and child processes.
//!
//! - [`mod@file`]: capped, non-blocking, regular-file-only reads. A host path may
//!   hold anything (a FIFO that would block an open forever, `/dev/zero`, a
//!   directory), so every read of a host file goes through here. A path
//!   under the host root is read with [`read_in_root`]: `..` refused and
//!   symlinks resolved with the host root as `/`, so none leads outside it.
//! - [`child`]: a child process under a deadline, in its own process group,
//!   with bounded capture; on timeout the whole group is killed before the
//!   leader is reaped, so the group id cannot have been reused.

pub mod child;
pub mod file;

pub use child::{child_path, describe_status, last_line, minimal_env, run, Capture, Keep, Ran};
pub use file::{
    open_capped, read_capped, read_capped_bytes, read_in_root, read_operator_file, read_value,
    resolve_in_root, CappedReader, ReadError,
};
