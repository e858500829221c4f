//! Node identity: which machine, which boot, which OS.

use crate::{host::HostPaths, hostio, proto::v1::NodeIdentity};

/// Identity files (hostname, ids, kernel release) are one short line.
const MAX_ID_BYTES: usize = 4096;
/// os-release is a few hundred bytes; anything this big is not one.
const MAX_OS_RELEASE_BYTES: usize = 64 * 1024;

/// The agent's own version, from Cargo.toml.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Reads the node's identity. Unreadable pieces stay empty.
pub fn observe(paths: &HostPaths) -> NodeIdentity {
    let read = |p: &std::path::Path| {
        hostio::read_value(p, MAX_ID_BYTES)
            .map(|s| s.trim().to_string())
            .ok()
    };

    // The host's /etc/hostname first: an extension service has its own UTS
    // namespace, so the kernel's answer there is the container's name.
    let (hostname, hostname_source) = match read(&paths.etc_hostname()).filter(|h| !h.is_empty()) {
        Some(h) => (h, "/etc/hostname".to_string()),
        None => (
            read(&paths.kernel_hostname()).unwrap_or_default(),
            "kernel".to_string(),
        ),
    };
    let (os_name, os_version_id) = paths
        .os_release()
        .iter()
        .find_map(|p| hostio::read_value(p, MAX_OS_RELEASE_BYTES).ok())
        .map(|text| parse_os_release(&text))
        .unwrap_or_default();

    NodeIdentity {
        hostname,
        hostname_source,
        boot_id: read(&paths.boot_id()).unwrap_or_default(),
        machine_id: read(&paths.machine_id()).unwrap_or_default(),
        kernel_release: read(&paths.kernel_release()).unwrap_or_default(),
        os_name,
        os_version_id,
    }
}

/// `NAME` and `VERSION_ID` from os-release(5) text (shell-style assignments,
/// optionally quoted). Unknown or malformed lines are ignored.
pub fn parse_os_release(text: &str) -> (String, String) {
    let mut name = String::new();
    let mut version = String::new();
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('=') else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim() {
            "NAME" => name = value,
            "VERSION_ID" => version = value,
            _ => {}
        }
    }
    (name, version)
}

fn unquote(v: &str) -> String {
    let inner = v
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(v);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out.chars().take(256).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_talos_and_debian_os_release() {
        let talos =
            "NAME=\"Talos\"\nID=talos\nVERSION_ID=v1.11.0\nPRETTY_NAME=\"Talos (v1.11.0)\"\n";
        assert_eq!(parse_os_release(talos), ("Talos".into(), "v1.11.0".into()));
        let debian = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n";
        assert_eq!(
            parse_os_release(debian),
            ("Debian GNU/Linux".into(), "12".into())
        );
        assert_eq!(
            parse_os_release("garbage\n=\nNAME"),
            (String::new(), String::new())
        );
        assert_eq!(
            parse_os_release("NAME='a \\\"b'"),
            ("a \"b".into(), String::new())
        );
    }

    #[test]
    fn prefers_the_host_hostname_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = HostPaths::under(dir.path());
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel/random")).unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/hostname"), "container\n").unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/random/boot_id"), "b-1\n").unwrap();
        let id = observe(&p);
        assert_eq!(
            (id.hostname.as_str(), id.hostname_source.as_str()),
            ("container", "kernel")
        );
        assert_eq!(id.boot_id, "b-1");
        std::fs::write(dir.path().join("etc/hostname"), "worker-1\n").unwrap();
        std::fs::write(dir.path().join("usr-lib-missing"), "").unwrap();
        let id = observe(&p);
        assert_eq!(id.hostname, "worker-1");
        assert_eq!(id.machine_id, "");
    }
}
