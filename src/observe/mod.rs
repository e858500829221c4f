//! Observation: the only part of the agent that touches the host.
//!
//! Each submodule returns plain report data and never panics: a failure to
//! read or probe becomes a reported error inside the data, so evaluation can
//! say "unknown" or "failed" instead of the whole request failing.

pub mod cri;
pub mod gvisor;
pub mod node;
pub mod sysctl;
pub mod userns;

use std::time::{Duration, SystemTime};

use crate::proto::v1::{Probe, ProbeOutcome};

/// Converts a `std` duration to the protobuf one.
pub fn pb_duration(d: Duration) -> pbjson_types::Duration {
    pbjson_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Converts a wall-clock time to the protobuf timestamp.
pub fn pb_timestamp(t: SystemTime) -> pbjson_types::Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    pbjson_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The symbolic name of an errno, for reports people read.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        0 => "",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EUSERS => "EUSERS",
        _ => "E?",
    }
}

/// A probe result with the given outcome.
pub fn probe(
    outcome: ProbeOutcome,
    errno: i32,
    message: impl Into<String>,
    duration: Duration,
) -> Probe {
    Probe {
        outcome: outcome as i32,
        errno,
        errno_name: errno_name(errno).to_string(),
        message: message.into(),
        duration: Some(pb_duration(duration)),
        ran_at: Some(pb_timestamp(SystemTime::now())),
    }
}

/// A probe that did not run, with the reason.
pub fn skipped(message: impl Into<String>) -> Probe {
    Probe {
        outcome: ProbeOutcome::Skipped as i32,
        message: message.into(),
        ..Probe::default()
    }
}
