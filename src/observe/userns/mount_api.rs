//! The new mount API calls `nix` does not wrap (`fsopen`, `fsconfig`,
//! `fsmount`, `mount_setattr`), as safe functions returning
//! owned descriptors. The only `unsafe` of the idmapped-mount probe is here.
//!
//! Constants come from uapi/linux/mount.h and uapi/linux/fcntl.h, spelled out
//! because not every libc release exports them on every target.

use std::{
    ffi::CStr,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
};

use nix::errno::Errno;

const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const OPEN_TREE_CLONE: libc::c_uint = 0x1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A syscall's return value as a new descriptor the caller owns.
fn new_fd(ret: libc::c_long) -> nix::Result<OwnedFd> {
    let fd = RawFd::try_from(Errno::result(ret)?).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned `fd` as a new descriptor of this
    // process; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fsopen(name, FSOPEN_CLOEXEC)`: a new filesystem context.
pub fn fsopen(name: &CStr) -> nix::Result<OwnedFd> {
    // SAFETY: `name` is a live NUL-terminated string; the call reads only it.
    new_fd(unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) })
}

/// `fsconfig(fs, FSCONFIG_CMD_CREATE)`: creates the superblock.
pub fn fsconfig_create(fs: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: FSCONFIG_CMD_CREATE takes no key, value or aux; null is what
    // the kernel expects for them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    Errno::result(ret).map(drop)
}

/// `fsmount(fs, FSMOUNT_CLOEXEC, 0)`: a detached mount of a created context.
pub fn fsmount(fs: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    new_fd(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) })
}

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE)`: a detached copy of the
/// mount at `path` (not its submounts), which may then be idmapped.
pub fn open_tree_clone(path: &CStr) -> nix::Result<OwnedFd> {
    // SAFETY: `path` is a live NUL-terminated string; the call reads only it.
    new_fd(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    })
}

/// `mount_setattr(mnt, "", AT_EMPTY_PATH | AT_RECURSIVE, {MOUNT_ATTR_IDMAP,
/// userns})`: idmaps the detached mount `mnt` with the user namespace. The
/// kernel allows this only on a mount that was never attached, such as an
/// `fsmount()` descriptor (Linux 5.12; tmpfs from 6.3).
pub fn mount_setattr_idmap(mnt: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> nix::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns.as_raw_fd()).map_err(|_| Errno::EBADF)?,
    };
    // SAFETY: `attr` is a live, correctly laid out mount_attr and its size
    // is passed with it; the path is a static empty NUL-terminated string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}
