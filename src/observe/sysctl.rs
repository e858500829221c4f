//! Sysctls read from `/proc/sys`, and the validation of sysctl names.
//!
//! A sysctl name becomes a path under `/proc/sys`, so every name that comes
//! from a flag or a request is validated first: no `..`, no empty parts, no
//! characters outside the kernel's naming habits.

use std::{
    fs,
    io::Read,
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::Path,
};

use thiserror::Error;

use crate::proto::v1::{Sysctl, SysctlState};

/// Values longer than this are refused (every real sysctl is far shorter).
pub const MAX_VALUE_BYTES: usize = 4096;
/// Names longer than this are refused.
pub const MAX_NAME_BYTES: usize = 256;

/// The sysctls that decide whether user namespaces can be created, besides
/// every `user.max_*_namespaces` (listed from the directory).
pub const USERNS_EXTRA: &[&str] = &[
    "kernel.unprivileged_userns_clone",
    "kernel.apparmor_restrict_unprivileged_userns",
    "kernel.yama.ptrace_scope",
];

/// Why a sysctl name was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("sysctl name is empty")]
    Empty,
    #[error("sysctl name {0:?} is longer than {MAX_NAME_BYTES} bytes")]
    TooLong(String),
    #[error("sysctl name {0:?} has an empty part")]
    EmptyPart(String),
    #[error("sysctl name {0:?} has a '.' or '..' part")]
    DotPart(String),
    #[error("sysctl name {name:?} has the character {ch:?}; allowed are letters, digits, '_', '-' and '.' separators")]
    BadChar { name: String, ch: char },
}

/// Splits a sysctl name into its path parts, validating it.
///
/// Accepts the dotted form (`user.max_user_namespaces`) and, like sysctl(8),
/// the slashed form for names whose parts contain dots
/// (`net/ipv4/conf/eth0.100/rp_filter`).
pub fn name_parts(name: &str) -> Result<Vec<&str>, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.chars().take(64).collect()));
    }
    let slashed = name.contains('/');
    let parts: Vec<&str> = if slashed {
        name.split('/').collect()
    } else {
        name.split('.').collect()
    };
    for part in &parts {
        if part.is_empty() {
            return Err(NameError::EmptyPart(name.to_string()));
        }
        if *part == "." || *part == ".." {
            return Err(NameError::DotPart(name.to_string()));
        }
        if let Some(ch) = part.chars().find(|c| {
            !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || (slashed && *c == '.'))
        }) {
            return Err(NameError::BadChar {
                name: name.to_string(),
                ch,
            });
        }
    }
    Ok(parts)
}

/// Checks a sysctl name without reading anything.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    name_parts(name).map(|_| ())
}

/// Reads one sysctl. Never fails: absence and errors are reported in the result.
pub fn read(proc_sys: &Path, name: &str) -> Sysctl {
    let mut out = Sysctl {
        name: name.to_string(),
        ..Sysctl::default()
    };
    let parts = match name_parts(name) {
        Ok(parts) => parts,
        Err(e) => {
            out.state = SysctlState::Unreadable as i32;
            out.error = e.to_string();
            return out;
        }
    };
    let path = parts
        .iter()
        .fold(proc_sys.to_path_buf(), |p, part| p.join(part));
    match read_capped(&path) {
        Ok(value) => {
            out.state = SysctlState::Present as i32;
            out.value = value;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.state = SysctlState::Absent as i32;
        }
        Err(e) => {
            out.state = SysctlState::Unreadable as i32;
            out.error = format!("cannot read {}: {e}", path.display());
        }
    }
    out
}

/// Reads a small text file, refusing more than [`MAX_VALUE_BYTES`].
pub fn read_capped(path: &Path) -> std::io::Result<String> {
    read_file_capped(path, MAX_VALUE_BYTES)
}

/// Reads a small host text file: regular files only, opened non-blocking
/// (a FIFO planted in place of a host file must not hang an observation),
/// at most `max` bytes, trailing newline removed.
pub fn read_file_capped(path: &Path, max: usize) -> std::io::Result<String> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "a special file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    let mut buf = Vec::with_capacity(64);
    file.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("value is longer than {max} bytes"),
        ));
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(text.trim_end_matches('\n').to_string())
}

/// Every `user.max_*_namespaces` the kernel has, sorted, plus [`USERNS_EXTRA`].
pub fn userns_names(proc_sys: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(proc_sys.join("user"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("max_") && n.ends_with("_namespaces"))
                .map(|n| format!("user.{n}"))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        // The directory could not be listed: still report the one that matters.
        names.push("user.max_user_namespaces".to_string());
    }
    names.sort();
    names.extend(USERNS_EXTRA.iter().map(|s| s.to_string()));
    names
}

/// Reads the user namespace sysctls and any extra names (deduplicated).
pub fn read_all(proc_sys: &Path, extra: &[String]) -> Vec<Sysctl> {
    let mut names = userns_names(proc_sys);
    for name in extra {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names.iter().map(|n| read(proc_sys, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_names() {
        assert_eq!(
            name_parts("user.max_user_namespaces"),
            Ok(vec!["user", "max_user_namespaces"])
        );
        assert_eq!(
            name_parts("net/ipv4/conf/eth0.100/rp_filter"),
            Ok(vec!["net", "ipv4", "conf", "eth0.100", "rp_filter"])
        );
        assert!(validate_name("kernel.yama.ptrace_scope").is_ok());
        assert!(validate_name("net.ipv4.conf.all.rp_filter").is_ok());
    }

    #[test]
    fn refuses_hostile_names() {
        for bad in [
            "",
            "../etc/passwd",
            "user..max",
            "user.max/../../x",
            "user/../../etc/shadow",
            ".user",
            "user.",
            "user.max user",
            "user.max\0",
            "user.*",
            "/user/max",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(matches!(
            validate_name(&"a".repeat(MAX_NAME_BYTES + 1)),
            Err(NameError::TooLong(_))
        ));
    }

    #[test]
    fn reads_present_absent_and_oversized_values() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("user")).unwrap();
        fs::write(dir.path().join("user/max_user_namespaces"), "11255\n").unwrap();
        fs::write(
            dir.path().join("user/max_big"),
            "x".repeat(MAX_VALUE_BYTES + 1),
        )
        .unwrap();

        let s = read(dir.path(), "user.max_user_namespaces");
        assert_eq!(s.state, SysctlState::Present as i32);
        assert_eq!(s.value, "11255");

        let s = read(dir.path(), "kernel.unprivileged_userns_clone");
        assert_eq!(s.state, SysctlState::Absent as i32);
        assert!(s.error.is_empty());

        let s = read(dir.path(), "user.max_big");
        assert_eq!(s.state, SysctlState::Unreadable as i32);
        assert!(s.error.contains("longer than"), "{}", s.error);

        let s = read(dir.path(), "../x");
        assert_eq!(s.state, SysctlState::Unreadable as i32);
    }

    #[test]
    fn fifos_and_directories_are_unreadable_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("user/max_user_namespaces")).unwrap();
        let fifo = dir.path().join("user/max_net_namespaces");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);

        let s = read(dir.path(), "user.max_user_namespaces");
        assert_eq!(s.state, SysctlState::Unreadable as i32);
        assert!(s.error.contains("Is a directory"), "{}", s.error);

        // Without a writer, a blocking open of the FIFO would never return.
        let (tx, rx) = std::sync::mpsc::channel();
        let root = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(read(&root, "user.max_net_namespaces"));
        });
        let s = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("reading a FIFO blocked");
        assert_eq!(s.state, SysctlState::Unreadable as i32);
        assert!(
            s.error.contains("a FIFO, not a regular file"),
            "{}",
            s.error
        );
    }

    #[test]
    fn lists_every_max_namespaces_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("user")).unwrap();
        for n in [
            "max_user_namespaces",
            "max_mnt_namespaces",
            "max_inotify_watches",
        ] {
            fs::write(dir.path().join("user").join(n), "1\n").unwrap();
        }
        let names = userns_names(dir.path());
        assert_eq!(
            &names[..2],
            &["user.max_mnt_namespaces", "user.max_user_namespaces"]
        );
        assert!(!names.iter().any(|n| n.contains("inotify")));
        assert!(names.contains(&"kernel.yama.ptrace_scope".to_string()));
    }
}
