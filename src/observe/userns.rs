//! Live user namespace and idmapped-mount probes.
//!
//! `unshare(CLONE_NEWUSER)` fails with EINVAL in a multithreaded process, and
//! the agent runs tokio, so both probes run in a short-lived helper: the agent
//! binary re-executed with the hidden subcommand [`HELPER_ARG`]. The helper is
//! single-threaded, prints one JSON line and exits; everything it creates (a
//! child in a new user namespace, a detached tmpfs) dies with it.

use std::{
    ffi::CString,
    fs,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
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

/// Runs the helper (`exe __probe-userns`) and turns its answer into probes.
pub async fn observe(exe: &Path, timeout: Duration) -> (Probe, Probe) {
    let start = Instant::now();
    let child = tokio::process::Command::new(exe)
        .arg(HELPER_ARG)
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
                format!("cannot start the probe helper {}: {e}", exe.display()),
                start,
            )
        }
    };
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return both_error(format!("probe helper failed: {e}"), start),
        Err(_) => {
            return both_error(
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
        Ok(h) => (to_probe(&h.userns), to_probe(&h.idmap)),
        Err(e) => both_error(
            format!("probe helper answered badly ({}): {e}", out.status),
            start,
        ),
    }
}

fn both_error(message: String, start: Instant) -> (Probe, Probe) {
    let p = probe(ProbeOutcome::Error, 0, message, start.elapsed());
    (p.clone(), p)
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
    let start = Instant::now();
    let mut idmap = match &ns {
        Some(ns) => helper::probe_idmap(ns.fd.as_raw_fd()),
        None => RawProbe {
            skipped: true,
            message: "not run: it needs a user namespace, and creating one failed".into(),
            ..RawProbe::default()
        },
    };
    idmap.micros = micros(start);
    drop(ns);
    let out = HelperOutput { userns, idmap };
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

/// What an errno means for the idmapped mount step.
pub fn explain_idmap_errno(step: &str, errno: i32) -> String {
    let err = std::io::Error::from_raw_os_error(errno);
    match (step, errno) {
        ("unshare", libc::ENOSPC) => "user.max_mnt_namespaces limit reached (ENOSPC)".into(),
        ("mount_setattr" | "open_tree" | "fsopen", libc::ENOSYS) => {
            format!(
                "the kernel has no {step}(2) (idmapped mounts need Linux 5.12; tmpfs support 6.3)"
            )
        }
        ("mount_setattr", libc::EINVAL) => {
            "tmpfs does not support idmapped mounts on this kernel (needs Linux 6.3) (EINVAL)"
                .into()
        }
        (_, libc::EPERM) => {
            format!("{step} not permitted: needs CAP_SYS_ADMIN over the mount namespace (EPERM)")
        }
        _ => format!("{step} failed: {err}"),
    }
}

/// Syscall-level code of the helper. Only ever runs in the single-threaded
/// helper process.
mod helper {
    use super::*;

    // uapi/linux/mount.h and uapi/linux/fcntl.h; spelled out here because not
    // every libc release exports them on every target.
    const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
    const OPEN_TREE_CLONE: libc::c_uint = 0x1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }

    /// A child process parked in a new user namespace, and an fd to that
    /// namespace. Dropping it ends the child.
    pub struct ParkedNs {
        pub fd: OwnedFd,
        pid: libc::pid_t,
        release: OwnedFd,
    }

    impl Drop for ParkedNs {
        fn drop(&mut self) {
            // Shutting our end of the socket releases the parked child; kill
            // and reap it in case it is stuck.
            // SAFETY: `release` is our own live fd and `pid` our own child.
            unsafe {
                libc::shutdown(self.release.as_raw_fd(), libc::SHUT_RDWR);
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn fail(errno: i32, message: String) -> RawProbe {
        RawProbe {
            errno,
            message,
            ..RawProbe::default()
        }
    }

    fn socketpair() -> Result<(OwnedFd, OwnedFd), i32> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair writes.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(errno());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    fn write_i32(fd: libc::c_int, v: i32) {
        let b = v.to_ne_bytes();
        // SAFETY: writes 4 bytes from a live local buffer.
        unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    }

    fn read_i32(fd: libc::c_int) -> Option<i32> {
        let mut b = [0u8; 4];
        // SAFETY: reads at most 4 bytes into a live local buffer.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
        (n == 4).then(|| i32::from_ne_bytes(b))
    }

    /// Creates a user namespace in a forked child, writes its uid/gid maps
    /// from here (as a container runtime does), and checks the child sees
    /// itself as root.
    pub fn probe_userns(initial: bool) -> (RawProbe, Option<ParkedNs>) {
        let (ours, theirs) = match socketpair() {
            Ok(p) => p,
            Err(e) => {
                return (
                    fail(
                        e,
                        format!(
                            "socketpair failed: {}",
                            std::io::Error::from_raw_os_error(e)
                        ),
                    ),
                    None,
                )
            }
        };
        // SAFETY: the helper is single-threaded, so the child may run any code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = errno();
            return (
                fail(
                    e,
                    format!("fork failed: {}", std::io::Error::from_raw_os_error(e)),
                ),
                None,
            );
        }
        if pid == 0 {
            drop(ours);
            let fd = theirs.as_raw_fd();
            // SAFETY: plain syscall in the single-threaded child.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
            write_i32(fd, if rc == 0 { 0 } else { errno() });
            if rc == 0 && read_i32(fd).is_some() {
                // Become root inside, as a container runtime's init does: the
                // creator holds every capability in the new namespace.
                // SAFETY: plain syscalls in the single-threaded child.
                let root = unsafe {
                    libc::setresgid(0, 0, 0) == 0
                        && libc::setresuid(0, 0, 0) == 0
                        && libc::getuid() == 0
                        && libc::getgid() == 0
                };
                write_i32(fd, i32::from(root));
                // Park until the parent is done with our namespace.
                let _ = read_i32(fd);
            }
            // SAFETY: leave the forked child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(0) };
        }
        drop(theirs);
        let fd = ours.as_raw_fd();
        let reap = |pid| {
            // SAFETY: reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        };
        match read_i32(fd) {
            Some(0) => {}
            Some(e) => {
                reap(pid);
                return (fail(e, explain_userns_errno(e)), None);
            }
            None => {
                reap(pid);
                return (
                    fail(0, "the probe child died before reporting".into()),
                    None,
                );
            }
        }
        // Kubernetes gives each pod 65536 ids; outside the initial namespace
        // only the ids mapped into ours can be mapped again, so map root alone.
        let map = if initial {
            "0 65536 65536\n"
        } else {
            "0 0 1\n"
        };
        for file in ["uid_map", "gid_map"] {
            if let Err(e) = fs::write(format!("/proc/{pid}/{file}"), map) {
                reap(pid);
                let n = e.raw_os_error().unwrap_or(0);
                return (
                    fail(
                        n,
                        format!(
                            "user namespace created, but writing its {file} ({}) was refused: {e}",
                            map.trim()
                        ),
                    ),
                    None,
                );
            }
        }
        let ns_fd = fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from);
        write_i32(fd, 1);
        let root = read_i32(fd);
        let ns = match ns_fd {
            Ok(f) => f,
            Err(e) => {
                reap(pid);
                return (
                    fail(
                        e.raw_os_error().unwrap_or(0),
                        format!("cannot open the new user namespace: {e}"),
                    ),
                    None,
                );
            }
        };
        let parked = ParkedNs {
            fd: ns,
            pid,
            release: ours,
        };
        if root != Some(1) {
            return (
                fail(0, "user namespace created and mapped, but the child could not become root inside it".into()),
                None,
            );
        }
        let ok = RawProbe {
            passed: true,
            message: format!(
                "created a user namespace, mapped uid/gid \"{}\" and became root in it",
                map.trim()
            ),
            ..RawProbe::default()
        };
        (ok, Some(parked))
    }

    /// Creates a detached tmpfs in a private mount namespace and idmaps a
    /// clone of it with the user namespace `userns`.
    pub fn probe_idmap(userns: libc::c_int) -> RawProbe {
        // A private mount namespace: fsopen needs CAP_SYS_ADMIN over the
        // current one, and nothing we do must be visible outside.
        // SAFETY: plain syscall in the single-threaded helper.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("unshare", e));
        }
        let Ok(tmpfs) = CString::new("tmpfs") else {
            return fail(0, "internal: bad string".into());
        };
        // SAFETY: fsopen takes a NUL-terminated name and flags.
        let fs_fd = unsafe { libc::syscall(libc::SYS_fsopen, tmpfs.as_ptr(), FSOPEN_CLOEXEC) };
        if fs_fd < 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("fsopen", e));
        }
        // SAFETY: fsopen returned a new fd we own.
        let fs_fd = unsafe { OwnedFd::from_raw_fd(fs_fd as libc::c_int) };
        // SAFETY: FSCONFIG_CMD_CREATE takes no key or value.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs_fd.as_raw_fd(),
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        };
        if rc != 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("fsconfig", e));
        }
        // SAFETY: fsmount on a configured fs context fd.
        let mnt =
            unsafe { libc::syscall(libc::SYS_fsmount, fs_fd.as_raw_fd(), FSMOUNT_CLOEXEC, 0) };
        if mnt < 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("fsmount", e));
        }
        // SAFETY: fsmount returned a new fd we own.
        let mnt = unsafe { OwnedFd::from_raw_fd(mnt as libc::c_int) };

        let Ok(name) = CString::new("probe") else {
            return fail(0, "internal: bad string".into());
        };
        // SAFETY: openat relative to our mount fd with a NUL-terminated name.
        let f = unsafe {
            libc::openat(
                mnt.as_raw_fd(),
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        };
        if f < 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("create file on tmpfs", e));
        }
        // SAFETY: closes the fd openat just returned.
        unsafe { libc::close(f) };

        // Idmap a clone, as container runtimes do, rather than the original.
        let Ok(empty) = CString::new("") else {
            return fail(0, "internal: bad string".into());
        };
        // SAFETY: open_tree on our mount fd with an empty path.
        let tree = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                mnt.as_raw_fd(),
                empty.as_ptr(),
                OPEN_TREE_CLONE
                    | libc::O_CLOEXEC as libc::c_uint
                    | libc::AT_EMPTY_PATH as libc::c_uint
                    | AT_RECURSIVE,
            )
        };
        if tree < 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("open_tree", e));
        }
        // SAFETY: open_tree returned a new fd we own.
        let tree = unsafe { OwnedFd::from_raw_fd(tree as libc::c_int) };
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: userns as u64,
        };
        // SAFETY: `attr` is a live, correctly laid out mount_attr (VER0 size).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if rc != 0 {
            let e = errno();
            return fail(e, explain_idmap_errno("mount_setattr", e));
        }
        let owner = |dir: &OwnedFd| -> Option<u32> {
            // SAFETY: `st` is a zeroed stat buffer fstatat fills.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstatat on a valid dir fd and NUL-terminated name.
            let rc = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, 0) };
            (rc == 0).then_some(st.st_uid)
        };
        let detail = match (owner(&mnt), owner(&tree)) {
            (Some(a), Some(b)) => format!("; a file owned by uid {a} shows as uid {b} through it"),
            _ => String::new(),
        };
        RawProbe {
            passed: true,
            message: format!("idmapped a tmpfs with mount_setattr(MOUNT_ATTR_IDMAP){detail}"),
            ..RawProbe::default()
        }
    }
}

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
        assert!(explain_idmap_errno("mount_setattr", libc::EINVAL).contains("6.3"));
    }
}
