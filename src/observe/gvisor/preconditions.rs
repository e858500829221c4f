//! Tier 4, the raw side: what the host has that runsc's preconditions are
//! decided from. The decision itself is pure and lives in
//! [`crate::report::preconditions`].

use std::io;

use crate::host::HostPaths;

/// Whether the host has a kvm device: the host's `/dev/kvm`, else
/// `/sys/class/misc/kvm` (a Talos service has a private `/dev` but the host's
/// `/sys`). `None` when neither could be checked.
pub fn observe_kvm(host: &HostPaths) -> Option<bool> {
    match std::fs::metadata(host.dev_kvm()) {
        Ok(_) => return Some(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(_) => {}
    }
    match std::fs::metadata(host.sys_kvm()) {
        Ok(_) => Some(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}
