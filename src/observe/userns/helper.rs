//! Syscall-level code of the helper. Only ever runs in the single-threaded
//! helper process.

use std::{
    fs,
    os::fd::{AsFd, BorrowedFd, OwnedFd},
};

use nix::{
    errno::Errno,
    fcntl::{openat, OFlag},
    sched::{unshare, CloneFlags},
    sys::{
        signal::{kill, Signal},
        socket::{shutdown, socketpair, AddressFamily, Shutdown, SockFlag, SockType},
        stat::{fstatat, Mode},
        wait::waitpid,
    },
    unistd::{fork, getgid, getuid, read, setresgid, setresuid, write, ForkResult, Gid, Pid, Uid},
};

use super::{explain_idmap_errno, explain_userns_errno, mount_api, RawProbe};

/// A child process parked in a new user namespace, and an fd to that
/// namespace. Dropping it ends the child.
pub struct ParkedNs {
    pub fd: OwnedFd,
    pid: Pid,
    release: OwnedFd,
}

impl Drop for ParkedNs {
    fn drop(&mut self) {
        // Shutting our end of the socket releases the parked child; kill and
        // reap it in case it is stuck.
        use std::os::fd::AsRawFd;
        let _ = shutdown(self.release.as_raw_fd(), Shutdown::Both);
        reap(self.pid);
    }
}

/// Kills and reaps our own child (it is never reaped elsewhere, so its pid
/// cannot have been reused).
fn reap(pid: Pid) {
    let _ = kill(pid, Signal::SIGKILL);
    let _ = waitpid(pid, None);
}

fn fail(errno: Errno, message: String) -> RawProbe {
    RawProbe {
        errno: errno as i32,
        message,
        ..RawProbe::default()
    }
}

fn write_i32(fd: BorrowedFd<'_>, v: i32) {
    let _ = write(fd, &v.to_ne_bytes());
}

fn read_i32(fd: BorrowedFd<'_>) -> Option<i32> {
    let mut b = [0u8; 4];
    (read(fd, &mut b) == Ok(4)).then(|| i32::from_ne_bytes(b))
}

/// The forked child: creates the user namespace, reports, becomes root once
/// its maps are written, and parks until the parent is done with it.
fn child(fd: BorrowedFd<'_>) -> ! {
    let created = unshare(CloneFlags::CLONE_NEWUSER);
    write_i32(fd, created.err().map_or(0, |e| e as i32));
    if created.is_ok() && read_i32(fd).is_some() {
        // Become root inside, as a container runtime's init does: the creator
        // holds every capability in the new namespace.
        let root = Gid::from_raw(0);
        let uroot = Uid::from_raw(0);
        let became_root = setresgid(root, root, root).is_ok()
            && setresuid(uroot, uroot, uroot).is_ok()
            && getuid().is_root()
            && getgid() == root;
        write_i32(fd, i32::from(became_root));
        // Park until the parent is done with our namespace.
        let _ = read_i32(fd);
    }
    // SAFETY: _exit(2) ends the forked child at once, without running the
    // parent's destructors or atexit handlers (nix does not wrap it).
    unsafe { libc::_exit(0) }
}

/// The uid/gid map written for the probe's user namespace, and the outside
/// id its root maps to.
pub fn id_map(initial: bool) -> (&'static str, u32) {
    // Kubernetes gives each pod 65536 ids; outside the initial namespace only
    // the ids mapped into ours can be mapped again, so map root alone.
    if initial {
        ("0 65536 65536\n", 65536)
    } else {
        ("0 0 1\n", 0)
    }
}

/// Creates a user namespace in a forked child, writes its uid/gid maps from
/// here (as a container runtime does), and checks the child sees itself as
/// root.
pub fn probe_userns(initial: bool) -> (RawProbe, Option<ParkedNs>) {
    let (ours, theirs) = match socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => {
            return (
                fail(e, format!("socketpair failed: {}", std::io::Error::from(e))),
                None,
            )
        }
    };
    // SAFETY: the helper is single-threaded (it runs before any thread
    // starts), so the child may run any code, not only async-signal-safe
    // calls.
    let pid = match unsafe { fork() } {
        Err(e) => {
            return (
                fail(e, format!("fork failed: {}", std::io::Error::from(e))),
                None,
            )
        }
        Ok(ForkResult::Child) => {
            drop(ours);
            child(theirs.as_fd())
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    drop(theirs);
    let fd = ours.as_fd();
    match read_i32(fd) {
        Some(0) => {}
        Some(e) => {
            reap(pid);
            return (fail(Errno::from_raw(e), explain_userns_errno(e)), None);
        }
        None => {
            reap(pid);
            return (
                fail(
                    Errno::UnknownErrno,
                    "the probe child died before reporting".into(),
                ),
                None,
            );
        }
    }
    let (map, _) = id_map(initial);
    for file in ["uid_map", "gid_map"] {
        if let Err(e) = fs::write(format!("/proc/{pid}/{file}"), map) {
            reap(pid);
            let n = Errno::from_raw(e.raw_os_error().unwrap_or(0));
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
                    Errno::from_raw(e.raw_os_error().unwrap_or(0)),
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
            fail(
                Errno::UnknownErrno,
                "user namespace created and mapped, but the child could not become root inside it"
                    .into(),
            ),
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

/// Creates a detached tmpfs in a private mount namespace and idmaps it with
/// the user namespace `userns`, whose root is `mapped_root` outside. A file
/// the helper (uid 0) creates must then show as `mapped_root` through the
/// mount. `release` is the kernel release, for explaining a refusal.
pub fn probe_idmap(userns: BorrowedFd<'_>, mapped_root: u32, release: Option<&str>) -> RawProbe {
    match idmap(userns, mapped_root) {
        Ok(detail) => RawProbe {
            passed: true,
            message: format!("idmapped a tmpfs with mount_setattr(MOUNT_ATTR_IDMAP){detail}"),
            ..RawProbe::default()
        },
        Err(IdmapError::Syscall(step, e)) => fail(e, explain_idmap_errno(step, e as i32, release)),
        Err(IdmapError::WrongOwner { before, after }) => fail(
            Errno::UnknownErrno,
            format!(
                "mount_setattr(MOUNT_ATTR_IDMAP) succeeded, but a file owned by uid {before} shows as uid {after} through the mount instead of uid {mapped_root}"
            ),
        ),
    }
}

enum IdmapError {
    Syscall(&'static str, Errno),
    /// The mount was idmapped, but ownership through it is not translated.
    WrongOwner {
        before: u32,
        after: u32,
    },
}

fn idmap(userns: BorrowedFd<'_>, mapped_root: u32) -> Result<String, IdmapError> {
    let at = |step: &'static str| move |e: Errno| IdmapError::Syscall(step, e);
    // A private mount namespace: fsopen needs CAP_SYS_ADMIN over the current
    // one, and nothing we do must be visible outside.
    unshare(CloneFlags::CLONE_NEWNS).map_err(at("unshare"))?;
    let fs = mount_api::fsopen(c"tmpfs").map_err(at("fsopen"))?;
    mount_api::fsconfig_create(fs.as_fd()).map_err(at("fsconfig"))?;
    let mnt = mount_api::fsmount(fs.as_fd()).map_err(at("fsmount"))?;
    let file = openat(
        &mnt,
        c"probe",
        OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(at("create file on tmpfs"))?;
    drop(file);
    let owner = |dir: &OwnedFd, step: &'static str| {
        fstatat(dir, c"probe", nix::fcntl::AtFlags::empty())
            .map(|st| st.st_uid)
            .map_err(at(step))
    };
    let before = owner(&mnt, "stat file on tmpfs")?;
    // Idmap the fsmount() descriptor itself: it is detached and never
    // attached, which is what mount_setattr(MOUNT_ATTR_IDMAP) requires, and
    // it works from 5.12 on. Cloning it first with open_tree(OPEN_TREE_CLONE)
    // is refused (EINVAL) before 6.15, which allows cloning only mounts of
    // the caller's own mount namespace.
    mount_api::mount_setattr_idmap(mnt.as_fd(), userns).map_err(at("mount_setattr"))?;
    let after = owner(&mnt, "stat file through the idmapped mount")?;
    if before != 0 || after != mapped_root {
        return Err(IdmapError::WrongOwner { before, after });
    }
    Ok(format!(
        "; a file owned by uid {before} shows as uid {after} through it"
    ))
}

/// Idmaps a clone of the mount holding `dir` (the runtime's root directory),
/// as a runtime does for a `hostUsers: false` pod's volumes: the filesystem
/// there (ext4, xfs, btrfs, overlay...) must support idmapped mounts, which
/// tmpfs passing does not prove.
pub fn probe_state_idmap(
    userns: BorrowedFd<'_>,
    mapped_root: u32,
    dir: &std::path::Path,
    release: Option<&str>,
) -> RawProbe {
    let at = |step: &'static str| move |e: Errno| IdmapError::Syscall(step, e);
    let run = || -> Result<String, IdmapError> {
        // Our own mount namespace again: the clone must come from the
        // caller's namespace, and nothing done here may leak out.
        unshare(CloneFlags::CLONE_NEWNS).map_err(at("unshare"))?;
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| IdmapError::Syscall("open_tree", Errno::EINVAL))?;
        let before = nix::sys::stat::stat(c.as_c_str())
            .map_err(at("stat"))?
            .st_uid;
        let clone = mount_api::open_tree_clone(&c).map_err(at("open_tree"))?;
        mount_api::mount_setattr_idmap(clone.as_fd(), userns).map_err(at("mount_setattr"))?;
        let after = nix::sys::stat::fstat(&clone)
            .map_err(at("stat through the idmapped mount"))?
            .st_uid;
        if before == 0 && after != mapped_root {
            return Err(IdmapError::WrongOwner { before, after });
        }
        Ok(format!(
            "; owned by uid {before}, it shows as uid {after} through the clone"
        ))
    };
    let d = dir.display();
    match run() {
        Ok(detail) => RawProbe {
            passed: true,
            message: format!(
                "idmapped a clone of {d} (open_tree(OPEN_TREE_CLONE), mount_setattr(MOUNT_ATTR_IDMAP)){detail}"
            ),
            ..RawProbe::default()
        },
        Err(IdmapError::Syscall(step @ ("stat" | "open_tree"), e)) if e == Errno::ENOENT => fail(
            e,
            format!("the runtime's root directory {d} does not exist here ({step}: ENOENT): bind it into the agent read-only, or name the right CRI endpoint"),
        ),
        Err(IdmapError::Syscall("mount_setattr", e)) if e == Errno::EINVAL => fail(
            e,
            format!(
                "the filesystem holding {d} refuses idmapped mounts (mount_setattr(MOUNT_ATTR_IDMAP): EINVAL): put the runtime's root on ext4, xfs or btrfs (Linux >= 5.12) or use a kernel whose driver for it supports idmapping; {}",
                release.map_or_else(|| "the kernel release is unknown".to_string(), |r| format!("this kernel is {}", r.trim()))
            ),
        ),
        Err(IdmapError::Syscall(step, e)) => fail(
            e,
            format!("on {d}: {}", explain_idmap_errno(step, e as i32, release)),
        ),
        Err(IdmapError::WrongOwner { before, after }) => fail(
            Errno::UnknownErrno,
            format!("{d} was idmapped, but its owner uid {before} shows as uid {after} through the clone instead of uid {mapped_root}"),
        ),
    }
}
