//! Sysctls read from `/proc/sys`. Names are validated by
//! [`crate::sysctl_name`] before they become paths.

use std::{fs, os::unix::fs::PermissionsExt, path::Path};

use crate::{
    hostio,
    proto::v1::{Sysctl, SysctlState},
    sysctl_name::{name_parts, MAX_VALUE_BYTES},
};

/// The sysctls that decide whether user namespaces can be created, besides
/// every `user.max_*_namespaces` (listed from the directory).
pub const USERNS_EXTRA: &[&str] = &[
    "kernel.unprivileged_userns_clone",
    "kernel.apparmor_restrict_unprivileged_userns",
    "kernel.yama.ptrace_scope",
];

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
    // The mode is checked before anything is read: a sysctl only root may
    // read can hold a secret (tcp_fastopen_key, stable_secret), and reading
    // some has side effects (vm.stat_refresh). Root could read them; the
    // agent serves its report to clients that are not root, so it does not.
    match fs::metadata(&path) {
        Ok(m) if m.permissions().mode() & 0o004 == 0 => {
            out.state = SysctlState::Withheld as i32;
            out.error = format!(
                "not readable by others (mode {:04o}), so its value is not served",
                m.permissions().mode() & 0o7777
            );
            return out;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.state = SysctlState::Absent as i32;
            return out;
        }
        _ => {}
    }
    match hostio::read_value(&path, MAX_VALUE_BYTES) {
        Ok(value) => {
            out.state = SysctlState::Present as i32;
            out.value = value;
        }
        Err(e) if e.is_not_found() => {
            out.state = SysctlState::Absent as i32;
        }
        Err(e) => {
            out.state = SysctlState::Unreadable as i32;
            out.error = e.to_string();
        }
    }
    out
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
        assert!(s.error.contains("larger than"), "{}", s.error);

        let s = read(dir.path(), "../x");
        assert_eq!(s.state, SysctlState::Unreadable as i32);
    }

    #[test]
    fn fifos_and_directories_are_unreadable_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("user/max_user_namespaces")).unwrap();
        let fifo = dir.path().join("user/max_net_namespaces");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Readable by others, so the read itself is what must not block.
        fs::set_permissions(&fifo, fs::Permissions::from_mode(0o644)).unwrap();

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
    fn a_sysctl_others_may_not_read_is_withheld_unread() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("net/ipv4")).unwrap();
        let key = dir.path().join("net/ipv4/tcp_fastopen_key");
        fs::write(&key, "secret-key\n").unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        let s = read(dir.path(), "net.ipv4.tcp_fastopen_key");
        assert_eq!(s.state(), SysctlState::Withheld);
        assert!(s.value.is_empty());
        assert!(s.error.contains("mode 0600"), "{}", s.error);
        assert!(!s.error.contains("secret"));
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            read(dir.path(), "net.ipv4.tcp_fastopen_key").value,
            "secret-key"
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
