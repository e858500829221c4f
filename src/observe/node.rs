//! Node identity: which machine, which boot, which OS.

use crate::{host::HostPaths, hostio, proto::v1::NodeIdentity};

/// Identity files (hostname, ids, kernel release) are one short line.
const MAX_ID_BYTES: usize = 4096;
/// os-release is a few hundred bytes; anything this big is not one.
const MAX_OS_RELEASE_BYTES: usize = 64 * 1024;

/// The agent's own version, from Cargo.toml.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// sandbox-readiness's application id for [`app_specific_machine_id`]:
/// 16 random bytes drawn once, with the v4 UUID bits set as `systemd-id128
/// new` makes them. Never change it: every node's id would change with it.
const APP_ID: [u8; 16] = [
    0x52, 0xb1, 0x34, 0x16, 0x17, 0x5a, 0x44, 0x30, 0xab, 0x23, 0xdc, 0x9b, 0x46, 0xf9, 0x8e, 0x23,
];

/// The machine id as systemd's `sd_id128_get_machine_app_specific()` hashes
/// it for one application: HMAC-SHA256 keyed with the id's 16 bytes over
/// `APP_ID`, the first 16 bytes of the tag made a v4 UUID, as 32 lowercase
/// hex digits (what `systemd-id128 machine-id --app-specific=APP_ID`
/// prints). Stable for the machine, useless for finding its real id.
/// `None` for text that is not an id, or the all-zero (uninitialised) one.
pub fn app_specific_machine_id(machine_id: &str) -> Option<String> {
    let id = parse_id128(machine_id.trim())?;
    if id == [0; 16] {
        return None;
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &id);
    let tag = ring::hmac::sign(&key, &APP_ID);
    let mut out = [0u8; 16];
    out.copy_from_slice(tag.as_ref().get(..16)?);
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    Some(out.iter().map(|b| format!("{b:02x}")).collect())
}

/// 32 hex digits, or the same as a dashed UUID (as systemd accepts both).
fn parse_id128(s: &str) -> Option<[u8; 16]> {
    let hex: String = if s.len() == 36 {
        let dashes = [8, 13, 18, 23];
        if !s
            .char_indices()
            .all(|(i, c)| dashes.contains(&i) == (c == '-'))
        {
            return None;
        }
        s.chars().filter(|&c| c != '-').collect()
    } else {
        s.to_string()
    };
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

/// Reads the node's identity. Unreadable pieces stay empty; the raw
/// machine id only with `expose_machine_id` (it is confidential: see
/// machine-id(5)), its app-specific hash always.
pub fn observe(paths: &HostPaths, expose_machine_id: bool) -> NodeIdentity {
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
    let machine_id = read(&paths.machine_id()).unwrap_or_default();

    NodeIdentity {
        hostname,
        hostname_source,
        boot_id: read(&paths.boot_id()).unwrap_or_default(),
        app_specific_machine_id: app_specific_machine_id(&machine_id).unwrap_or_default(),
        machine_id: if expose_machine_id {
            machine_id
        } else {
            String::new()
        },
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
#[allow(clippy::unwrap_used)]
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
        let id = observe(&p, false);
        assert_eq!(
            (id.hostname.as_str(), id.hostname_source.as_str()),
            ("container", "kernel")
        );
        assert_eq!(id.boot_id, "b-1");
        std::fs::write(dir.path().join("etc/hostname"), "worker-1\n").unwrap();
        std::fs::write(dir.path().join("usr-lib-missing"), "").unwrap();
        let id = observe(&p, false);
        assert_eq!(id.hostname, "worker-1");
        assert_eq!(id.machine_id, "");
        assert_eq!(id.app_specific_machine_id, "");

        std::fs::write(
            dir.path().join("etc/machine-id"),
            "0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        let hidden = observe(&p, false);
        assert_eq!(hidden.machine_id, "");
        assert_eq!(
            hidden.app_specific_machine_id,
            "06ced31bd0394e72aa3f27b66c7bfe85"
        );
        let shown = observe(&p, true);
        assert_eq!(shown.machine_id, "0123456789abcdef0123456789abcdef");
        assert_eq!(
            shown.app_specific_machine_id,
            hidden.app_specific_machine_id
        );
    }

    /// HMAC-SHA256 written out from its definition (RFC 2104) over
    /// ring's SHA-256: a second implementation to hold ring's HMAC to.
    fn hmac_sha256_by_hand(key: &[u8], msg: &[u8]) -> Vec<u8> {
        let sha = |parts: &[&[u8]]| {
            let mut c = ring::digest::Context::new(&ring::digest::SHA256);
            for p in parts {
                c.update(p);
            }
            c.finish().as_ref().to_vec()
        };
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        let ipad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
        let inner = sha(&[&ipad, msg]);
        sha(&[&opad, &inner])
    }

    #[test]
    fn app_specific_id_is_systemds_construction() {
        // Vectors from systemd itself: `systemd-id128 machine-id
        // --app-specific=52b13416175a4430ab23dc9b46f98e23` on a machine
        // whose /etc/machine-id is the first id; the second from the same
        // construction in Python's hmac module.
        for (machine, want) in [
            (
                "3d1219c7c4c5404aaa1f6d2a48adfda4",
                "79c514ec282641afa3da402b2956ad3e",
            ),
            (
                "0123456789abcdef0123456789abcdef",
                "06ced31bd0394e72aa3f27b66c7bfe85",
            ),
        ] {
            assert_eq!(app_specific_machine_id(machine).as_deref(), Some(want));
            let uuid = format!(
                "{}-{}-{}-{}-{}",
                &machine[..8],
                &machine[8..12],
                &machine[12..16],
                &machine[16..20],
                &machine[20..]
            );
            assert_eq!(app_specific_machine_id(&uuid).as_deref(), Some(want));

            let key = parse_id128(machine).unwrap();
            let mut by_hand = hmac_sha256_by_hand(&key, &APP_ID)[..16].to_vec();
            by_hand[6] = (by_hand[6] & 0x0f) | 0x40;
            by_hand[8] = (by_hand[8] & 0x3f) | 0x80;
            let by_hand: String = by_hand.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(by_hand, want);
        }
        for bad in [
            "",
            "00000000000000000000000000000000",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdeg",
            "01234567-89ab-cdef-0123-456789abcdef0",
            "0123456789-ab-cdef-0123-456789abcde",
        ] {
            assert_eq!(app_specific_machine_id(bad), None, "{bad:?}");
        }
    }
}
