//! Live user namespace and idmapped-mount probes.
//!
//! `unshare(CLONE_NEWUSER)` fails with EINVAL in a multithreaded process, and
//! the agent runs tokio, so both probes run in a short-lived helper: the agent
//! binary re-executed with the hidden subcommand [`HELPER_ARG`]. The helper is
//! single-threaded, prints one JSON line and exits; everything it creates (a
//! child in a new user namespace, a detached tmpfs) dies with it.

use std::{
    os::fd::AsFd,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::{
    host::HostPaths,
    hostio,
    observe::{probe, skipped},
    proto::v1::{Probe, ProbeOutcome},
};

/// A uid_map has at most 340 lines (the kernel's limit); far below this.
const MAX_UID_MAP_BYTES: usize = 32 * 1024;

/// A kernel release string is a few dozen bytes.
const MAX_RELEASE_BYTES: usize = 256;

/// The hidden subcommand that runs the probes.
pub const HELPER_ARG: &str = "__probe-userns";

/// One probe's result as the helper reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RawProbe {
    pub passed: bool,
    /// Not attempted (a prerequisite failed).
    pub skipped: bool,
    pub errno: i32,
    pub message: String,
    pub micros: u64,
}

/// What the helper prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelperOutput {
    pub userns: RawProbe,
    pub idmap: RawProbe,
    /// The idmapped clone of the runtime's root directory.
    #[serde(default)]
    pub state: RawProbe,
}

/// The three probes the helper runs.
#[derive(Debug, Clone, Default)]
pub struct Probes {
    pub userns: Probe,
    pub idmap: Probe,
    pub state: Probe,
}

/// Whether this process runs in the initial user namespace: its uid_map is
/// the identity over the whole 32-bit range.
pub fn in_initial_user_namespace(paths: &HostPaths) -> Option<bool> {
    let map = hostio::read_value(&paths.self_uid_map(), MAX_UID_MAP_BYTES).ok()?;
    Some(parse_is_initial(&map))
}

/// Pure part of [`in_initial_user_namespace`].
pub fn parse_is_initial(uid_map: &str) -> bool {
    let lines: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| !f.is_empty())
        .collect();
    matches!(lines.as_slice(), [f] if f.as_slice() == ["0", "0", "4294967295"])
}

/// Runs the helper (`exe __probe-userns STATE_DIR`) and turns its answer
/// into probes. `state_dir` is the runtime's root directory as the agent
/// sees it (under the host root).
pub async fn observe(exe: &Path, timeout: Duration, state_dir: &Path) -> Probes {
    let start = Instant::now();
    let child = tokio::process::Command::new(exe)
        .arg(HELPER_ARG)
        .arg(state_dir)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            return both_error(
                e.raw_os_error().unwrap_or(0),
                format!("cannot start the probe helper {}: {e}", exe.display()),
                start,
            )
        }
    };
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return both_error(
                e.raw_os_error().unwrap_or(0),
                format!("probe helper failed: {e}"),
                start,
            )
        }
        Err(_) => {
            return both_error(
                libc::ETIMEDOUT,
                format!(
                    "probe helper did not finish within {}",
                    humantime::format_duration(timeout)
                ),
                start,
            )
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<HelperOutput>(text.trim()) {
        Ok(h) => Probes {
            userns: to_probe(&h.userns),
            idmap: to_probe(&h.idmap),
            state: to_probe(&h.state),
        },
        Err(e) => both_error(
            0,
            format!("probe helper answered badly ({}): {e}", out.status),
            start,
        ),
    }
}

fn both_error(errno: i32, message: String, start: Instant) -> Probes {
    let p = probe(ProbeOutcome::Error, errno, message, start.elapsed());
    Probes {
        userns: p.clone(),
        idmap: p.clone(),
        state: p,
    }
}

fn to_probe(raw: &RawProbe) -> Probe {
    if raw.skipped {
        return skipped(raw.message.clone());
    }
    let outcome = if raw.passed {
        ProbeOutcome::Passed
    } else {
        ProbeOutcome::Failed
    };
    probe(
        outcome,
        raw.errno,
        raw.message.clone(),
        Duration::from_micros(raw.micros),
    )
}

/// Entry point of the helper process. Must run before any thread starts.
pub fn helper_main() -> i32 {
    let initial = parse_is_initial(
        &hostio::read_value(Path::new("/proc/self/uid_map"), MAX_UID_MAP_BYTES).unwrap_or_default(),
    );
    let start = Instant::now();
    let (mut userns, ns) = helper::probe_userns(initial);
    userns.micros = micros(start);
    let state_dir = std::env::args_os().nth(2).map(std::path::PathBuf::from);
    // Only to explain a refusal; the release is global, so the agent's own
    // /proc is right even inside a container.
    let release =
        hostio::read_value(Path::new("/proc/sys/kernel/osrelease"), MAX_RELEASE_BYTES).ok();
    let release = release.as_deref();
    let mapped = helper::id_map(initial).1;
    let needs_userns = || RawProbe {
        skipped: true,
        message: "not run: it needs a user namespace, and creating one failed".into(),
        ..RawProbe::default()
    };
    let start = Instant::now();
    let mut idmap = match &ns {
        Some(ns) => helper::probe_idmap(ns.fd.as_fd(), mapped, release),
        None => needs_userns(),
    };
    idmap.micros = micros(start);
    let start = Instant::now();
    let mut state = match (&ns, &state_dir) {
        (Some(ns), Some(dir)) => helper::probe_state_idmap(ns.fd.as_fd(), mapped, dir, release),
        (None, _) => needs_userns(),
        (_, None) => RawProbe {
            skipped: true,
            message: "not run: no runtime root directory given".into(),
            ..RawProbe::default()
        },
    };
    state.micros = micros(start);
    drop(ns);
    let out = HelperOutput {
        userns,
        idmap,
        state,
    };
    match serde_json::to_string(&out) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(_) => 1,
    }
}

fn micros(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// What an errno means for the user namespace creation step.
pub fn explain_userns_errno(errno: i32) -> String {
    match errno {
        libc::ENOSPC => "user.max_user_namespaces limit reached: the kernel refuses new user namespaces (ENOSPC)".into(),
        libc::EPERM => "not permitted: seccomp, an LSM (AppArmor/SELinux) or missing capabilities refuse user namespaces (EPERM)".into(),
        libc::EINVAL => "the kernel has no user namespaces (CONFIG_USER_NS) or the caller is multithreaded (EINVAL)".into(),
        libc::EUSERS => "user namespace nesting limit (32 levels) reached (EUSERS)".into(),
        libc::ENOMEM => "out of memory creating a user namespace (ENOMEM)".into(),
        e => format!("unshare(CLONE_NEWUSER) failed: {}", std::io::Error::from_raw_os_error(e)),
    }
}

/// The `major.minor` of a kernel release such as `6.1.0-28-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The first kernel whose tmpfs accepts idmapped mounts.
const TMPFS_IDMAP_SINCE: (u32, u32) = (6, 3);

/// What an errno means for a step of the idmapped mount probe, given the
/// kernel release (`None` when unknown).
pub fn explain_idmap_errno(step: &str, errno: i32, release: Option<&str>) -> String {
    let err = std::io::Error::from_raw_os_error(errno);
    let version = release.and_then(kernel_version);
    let kernel = release.map_or_else(
        || "the kernel release is unknown".to_string(),
        |r| format!("this kernel is {}", r.trim()),
    );
    match (step, errno) {
        ("unshare", libc::ENOSPC) => "user.max_mnt_namespaces limit reached (ENOSPC)".into(),
        ("mount_setattr" | "fsmount" | "fsopen", libc::ENOSYS) => format!(
            "the kernel has no {step}(2): idmapped mounts need Linux >= 5.12, on tmpfs >= 6.3; {kernel}"
        ),
        ("mount_setattr", libc::EINVAL) => match version {
            Some(v) if v >= TMPFS_IDMAP_SINCE => format!(
                "mount_setattr(MOUNT_ATTR_IDMAP) on a detached tmpfs was refused (EINVAL), although {kernel}, which supports idmapped tmpfs"
            ),
            _ => format!(
                "tmpfs needs kernel >= 6.3 for idmapped mounts, and {kernel} (mount_setattr(MOUNT_ATTR_IDMAP): EINVAL)"
            ),
        },
        (_, libc::EPERM) => {
            format!("{step} not permitted: needs CAP_SYS_ADMIN over the mount namespace (EPERM)")
        }
        _ => format!("{step} failed: {err}"),
    }
}

mod helper;
pub mod mount_api;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_initial_user_namespace() {
        assert!(parse_is_initial("         0          0 4294967295\n"));
        assert!(!parse_is_initial("         0          0          1\n"));
        assert!(!parse_is_initial("0 1000 1\n"));
        assert!(!parse_is_initial(""));
        assert!(!parse_is_initial("0 0 4294967295\n1 1 1\n"));
    }

    #[test]
    fn enospc_reads_as_the_limit() {
        assert!(explain_userns_errno(libc::ENOSPC)
            .starts_with("user.max_user_namespaces limit reached"));
    }

    #[test]
    fn reads_the_kernel_version_from_a_release() {
        assert_eq!(kernel_version("6.1.0-28-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("6.12.43-talos\n"), Some((6, 12)));
        assert_eq!(kernel_version("7.0"), Some((7, 0)));
        assert_eq!(kernel_version("5.15"), Some((5, 15)));
        assert_eq!(kernel_version("6"), None);
        assert_eq!(kernel_version("linux"), None);
        assert_eq!(kernel_version(""), None);
    }

    #[test]
    fn einval_from_mount_setattr_names_the_tmpfs_floor_on_old_kernels() {
        let old = explain_idmap_errno("mount_setattr", libc::EINVAL, Some("6.1.0-28-amd64\n"));
        assert_eq!(
            old,
            "tmpfs needs kernel >= 6.3 for idmapped mounts, and this kernel is 6.1.0-28-amd64 (mount_setattr(MOUNT_ATTR_IDMAP): EINVAL)"
        );
        let unknown = explain_idmap_errno("mount_setattr", libc::EINVAL, None);
        assert!(
            unknown.starts_with("tmpfs needs kernel >= 6.3"),
            "{unknown}"
        );
        assert!(unknown.contains("release is unknown"), "{unknown}");
        // 6.3 and later support it, so EINVAL there is something else and
        // must not blame the kernel version.
        for release in ["6.3.0", "6.12.43-talos", "6.18.1", "7.1.0-1-amd64"] {
            let new = explain_idmap_errno("mount_setattr", libc::EINVAL, Some(release));
            assert!(!new.contains("needs kernel"), "{release}: {new}");
            assert!(new.contains(release), "{new}");
        }
        // Other steps' EINVAL is not about tmpfs.
        let other = explain_idmap_errno("fsmount", libc::EINVAL, Some("6.1.0"));
        assert!(!other.contains("6.3"), "{other}");
    }

    #[test]
    fn missing_mount_api_names_5_12() {
        let m = explain_idmap_errno("mount_setattr", libc::ENOSYS, Some("5.10.0"));
        assert!(m.contains("5.12") && m.contains("5.10.0"), "{m}");
        let p = explain_idmap_errno("fsopen", libc::EPERM, Some("6.12.0"));
        assert!(p.contains("EPERM"), "{p}");
    }
}
