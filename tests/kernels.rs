//! Talos's kernel lines, booted for real, on both architectures the extension
//! ships: Debian's packaged amd64 and arm64 kernels under QEMU TCG (KVM stops
//! with "emulation failure" on this nested VM; arm64 is emulated anyway),
//! each with an initramfs of that architecture's busybox-static and the
//! shipped static musl binary (`--profile ship`), whose /init
//! (tests/fixtures/kernel/init) runs `probe --require-userns
//! --require-idmap-mounts` as JSON and as a table, writes 0 to
//! `user.max_user_namespaces` and runs both again, and prints every result
//! between markers on the serial console.
//!
//! | kernel | Debian | Talos line |
//! |---|---|---|
//! | 6.1  | bookworm | older than any Talos ≥ 1.7: tmpfs has no idmapped mounts before 6.3 |
//! | 6.12 | trixie   | Talos 1.9–1.11 |
//! | 7.x  | sid      | newer than any Talos yet (this VM's 6.18 is 1.12+) |
//!
//! Talos 1.7–1.8's 6.6 line is tested on neither architecture: Debian has
//! no 6.6 kernel.
//!
//! The 6.12 boot has `ipv6.disable=1` on its command line and first runs
//! `serve` on its default listen address and asks it with `check` from inside
//! the VM (the `disable_ipv6` sysctl does not stop a bind of `[::]`, so only
//! the boot parameter proves the fallback), then the probes: one boot per
//! kernel and architecture, six in all. The shipped binary is the node build,
//! which has no `check`: the initramfs also holds the operator build of the
//! same architecture (`sandbox-readiness-operator`, scripts/build-extension.sh
//! with `EXTENSION_OPERATOR=1`), which asks the agent, and the node build's
//! refusal of `check` is asserted too.
//!
//! | architecture | QEMU | machine | console |
//! |---|---|---|---|
//! | x86_64 | qemu-system-x86_64 | `pc`, `-cpu max` | ttyS0 |
//! | aarch64 | qemu-system-aarch64 | `virt`, `-cpu cortex-a57` (TCG runs it ~3× faster than `max`, whose pointer authentication it emulates) | ttyAMA0 |
//!
//! A boot takes 4–8 s (aarch64) and 5 s (x86_64; 14–30 s with the machine
//! loaded by other builds) here; at most
//! [`PARALLEL_BOOTS`] run at once and each is killed after [`BOOT_LIMIT`]. A
//! kernel boots once per run, shared by its tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::{Condvar, Mutex, OnceLock},
    time::Duration,
};

use serde_json::Value;
use support::testenv;

/// Hard limit for one boot (TCG on 2 busy cores; a boot alone takes ~5 s).
const BOOT_LIMIT: Duration = Duration::from_secs(150);
/// QEMU processes at once: one per core of this machine.
const PARALLEL_BOOTS: usize = 2;
/// The kernel whose boot also runs `serve` with `ipv6.disable=1`.
const SERVE_SUITE: &str = "trixie";
/// The sentence part every kernel must give for `user.max_user_namespaces` = 0.
const ENOSPC_SENTENCE: &str =
    "user.max_user_namespaces limit reached: the kernel refuses new user namespaces (ENOSPC)";

// ------------------------------------------------------------------ booting

/// An architecture the extension ships, and how QEMU boots it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Debian's kernel of `suite` for this architecture: image and release.
    fn kernel(self, suite: &str) -> (PathBuf, String) {
        match self {
            Arch::X86_64 => testenv::kernel(suite),
            Arch::Aarch64 => testenv::kernel_arm64(suite),
        }
    }

    fn busybox(self) -> PathBuf {
        match self {
            Arch::X86_64 => {
                let busybox = PathBuf::from("/bin/busybox");
                assert!(
                    busybox.is_file(),
                    "/bin/busybox is missing: scripts/install-test-deps.sh installs busybox-static"
                );
                busybox
            }
            Arch::Aarch64 => testenv::busybox_arm64(),
        }
    }

    fn binary(self) -> PathBuf {
        testenv::musl_binary_for(&format!("{}-unknown-linux-musl", self.name()))
    }

    /// The operator build (every command) of the same target, for `check`.
    fn operator_binary(self) -> PathBuf {
        testenv::operator_musl_binary_for(&format!("{}-unknown-linux-musl", self.name()))
    }

    fn qemu(self) -> PathBuf {
        match self {
            Arch::X86_64 => testenv::tool("qemu-system-x86_64", "qemu-system-x86"),
            Arch::Aarch64 => testenv::tool("qemu-system-aarch64", "qemu-system-arm"),
        }
    }

    /// Machine and CPU; the kernel's serial console on it.
    fn machine(self) -> (&'static [&'static str], &'static str) {
        match self {
            Arch::X86_64 => (&["-cpu", "max"], "ttyS0"),
            Arch::Aarch64 => (&["-M", "virt", "-cpu", "cortex-a57"], "ttyAMA0"),
        }
    }
}

/// The initramfs of `arch`, built once per run in a directory kept until
/// the process exits.
fn initramfs(arch: Arch) -> &'static Path {
    static INITRD: [OnceLock<(tempfile::TempDir, PathBuf)>; 2] = [OnceLock::new(), OnceLock::new()];
    &INITRD[arch as usize]
        .get_or_init(|| {
            let busybox = arch.busybox();
            testenv::tool("cpio", "cpio");
            let dir = tempfile::tempdir().unwrap();
            let tree = dir.path().join("tree");
            fs::create_dir_all(tree.join("bin")).unwrap();
            fs::copy(busybox, tree.join("bin/busybox")).unwrap();
            fs::copy(arch.binary(), tree.join("sandbox-readiness")).unwrap();
            fs::copy(
                arch.operator_binary(),
                tree.join("sandbox-readiness-operator"),
            )
            .unwrap();
            let init = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel/init");
            fs::copy(init, tree.join("init")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(tree.join("init"), fs::Permissions::from_mode(0o755)).unwrap();
            let initrd = dir.path().join("initrd.gz");
            let mut cmd = Command::new("sh");
            cmd.current_dir(&tree).arg("-c").arg(format!(
                "find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
                initrd.display()
            ));
            let done = testenv::run_limited(&mut cmd, Duration::from_secs(60)).unwrap();
            assert!(done.ok(), "cannot build the initramfs: {}", done.stderr);
            (dir, initrd)
        })
        .1
}

/// Counts QEMU processes so no more than [`PARALLEL_BOOTS`] run at once.
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
}

static SLOTS: Slots = Slots {
    used: Mutex::new(0),
    freed: Condvar::new(),
};

struct Slot;

impl Slot {
    fn take() -> Slot {
        let mut used = SLOTS.used.lock().unwrap();
        while *used >= PARALLEL_BOOTS {
            used = SLOTS.freed.wait(used).unwrap();
        }
        *used += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *SLOTS.used.lock().unwrap() -= 1;
        SLOTS.freed.notify_one();
    }
}

/// What one boot printed on its serial console, split at the markers.
#[derive(Debug)]
struct Boot {
    /// `<suite> <arch>`, for messages.
    suite: String,
    console: String,
    /// `@@SR-<KEY> <value>` lines (KERNEL, LIMIT, IPV6, SERVE-EXIT, ...);
    /// repeated keys keep every value in order.
    values: BTreeMap<String, Vec<String>>,
    /// Step name → (output, exit code).
    steps: BTreeMap<String, (String, i32)>,
}

impl Boot {
    fn step(&self, name: &str) -> (&str, i32) {
        let (out, rc) = self.steps.get(name).unwrap_or_else(|| {
            panic!(
                "{}: no step {name} on the console:\n{}",
                self.suite, self.console
            )
        });
        (out.as_str(), *rc)
    }

    fn json(&self, name: &str) -> (Value, i32) {
        let (out, rc) = self.step(name);
        let v = serde_json::from_str(out).unwrap_or_else(|e| {
            panic!(
                "{}: step {name} printed no JSON ({e}):\n{out}\nstderr:\n{}",
                self.suite,
                self.steps
                    .get(&format!("{name}.stderr"))
                    .map(|s| s.0.as_str())
                    .unwrap_or("")
            )
        });
        (v, rc)
    }

    fn value(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }
}

fn parse_console(suite: String, console: String) -> Boot {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut steps = BTreeMap::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("@@SR-BEGIN ") {
            open = Some((name.trim().to_string(), Vec::new()));
        } else if let Some(rest) = line.strip_prefix("@@SR-END ") {
            let (name, rc) = rest.rsplit_once(" rc=").unwrap_or((rest, "-1"));
            if let Some((open_name, lines)) = open.take() {
                assert_eq!(open_name, name, "{suite}: interleaved steps:\n{console}");
                let mut text = lines.join("\n");
                text.push('\n');
                steps.insert(open_name, (text, rc.trim().parse().unwrap_or(-1)));
            }
        } else if let Some(rest) = line.strip_prefix("@@SR-") {
            let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
            values
                .entry(key.to_string())
                .or_default()
                .push(value.to_string());
        } else if let Some((_, lines)) = open.as_mut() {
            lines.push(line);
        }
    }
    Boot {
        suite,
        console,
        values,
        steps,
    }
}

/// Boots `arch`'s kernel of `suite` with `srmode=<mode>` and extra kernel
/// parameters, and returns its console once it powered off.
fn boot(arch: Arch, suite: &'static str, mode: &str, params: &str) -> Boot {
    let (image, release) = arch.kernel(suite);
    let qemu = arch.qemu();
    let (machine, console) = arch.machine();
    let initrd = initramfs(arch);
    let label = format!("{suite} {}", arch.name());
    let _slot = Slot::take();
    let mut cmd = Command::new(qemu);
    cmd.args(["-accel", "tcg", "-m", "512", "-smp", "1"])
        .args(machine)
        .arg("-kernel")
        .arg(&image)
        .arg("-initrd")
        .arg(initrd)
        // loglevel=1: only emergencies reach the console between the markers.
        .arg("-append")
        .arg(format!(
            "console={console} quiet loglevel=1 panic=-1 srmode={mode} {params}"
        ))
        .args([
            "-display",
            "none",
            "-serial",
            "stdio",
            "-monitor",
            "none",
            "-nodefaults",
            "-no-reboot",
        ]);
    let done = testenv::run_limited(&mut cmd, BOOT_LIMIT)
        .unwrap_or_else(|e| panic!("{label} ({release}) did not power off: {e}"));
    eprintln!(
        "{label} ({release}) {mode} {params}: booted and powered off in {:.1} s",
        done.took.as_secs_f64()
    );
    let b = parse_console(label.clone(), done.stdout.clone());
    assert!(
        done.ok(),
        "qemu failed for {label}: {}\n{}",
        done.stderr,
        b.console
    );
    assert_eq!(
        b.value("KERNEL"),
        std::slice::from_ref(&release),
        "{label}: not the kernel asked for, or /init never ran:\n{}",
        b.console
    );
    assert!(
        b.values.contains_key("DONE"),
        "{label}: /init did not finish:\n{}",
        b.console
    );
    b
}

/// The boot of `arch`'s kernel of `suite`, once per run: the probes, and on
/// 6.12 (trixie) first `serve` with `ipv6.disable=1`.
fn kernel_boot(arch: Arch, suite: &'static str) -> &'static Boot {
    type Cells = BTreeMap<(Arch, &'static str), &'static OnceLock<Boot>>;
    static BOOTS: OnceLock<Mutex<Cells>> = OnceLock::new();
    let cell: &'static OnceLock<Boot> = {
        let mut map = BOOTS.get_or_init(Default::default).lock().unwrap();
        map.entry((arch, suite))
            .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
    };
    cell.get_or_init(|| match suite {
        SERVE_SUITE => boot(arch, suite, "serve+probe", "ipv6.disable=1"),
        _ => boot(arch, suite, "probe", ""),
    })
}

// --------------------------------------------------------------- assertions

fn probe<'a>(report: &'a Value, name: &str) -> &'a Value {
    &report["report"]["userNamespaces"][name]
}

fn outcome(report: &Value, name: &str) -> String {
    probe(report, name)["outcome"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn message(report: &Value, name: &str) -> String {
    probe(report, name)["message"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn finding_codes(report: &Value) -> Vec<String> {
    report["verdict"]["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x["code"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// At the default limit both probes pass and `probe` exits 0.
fn assert_converges(arch: Arch, suite: &'static str) {
    let b = kernel_boot(arch, suite);
    let suite = &b.suite;
    let limit: u64 = b.value("LIMIT")[0].parse().unwrap();
    assert!(limit > 0, "{suite}: the default limit is {limit}");
    let (json, rc) = b.json("json");
    assert_eq!(
        outcome(&json, "usernsCreate"),
        "PROBE_OUTCOME_PASSED",
        "{suite}: {}",
        message(&json, "usernsCreate")
    );
    assert_eq!(
        outcome(&json, "idmapMount"),
        "PROBE_OUTCOME_PASSED",
        "{suite}: {}",
        message(&json, "idmapMount")
    );
    assert_eq!(json["verdict"]["converged"], true, "{suite}: {json:#}");
    assert_eq!(rc, 0, "{suite}: probe exit code");
    let (table, rc) = b.step("table");
    assert_eq!(rc, 0, "{suite}: table probe exit code:\n{table}");
    assert!(table.contains("✓ user namespace creation"), "{table}");
    assert!(table.contains("✓ idmapped mount (tmpfs)"), "{table}");
}

/// With `user.max_user_namespaces` = 0, exit 1 with the ENOSPC sentence.
fn assert_limit_zero_is_enospc(arch: Arch, suite: &'static str) {
    let b = kernel_boot(arch, suite);
    let suite = &b.suite;
    assert_eq!(b.value("LIMIT").get(1).map(String::as_str), Some("0"));
    let (json, rc) = b.json("json-zero");
    assert_eq!(rc, 1, "{suite}: probe exit code at limit 0: {json:#}");
    assert_eq!(outcome(&json, "usernsCreate"), "PROBE_OUTCOME_FAILED");
    assert_eq!(probe(&json, "usernsCreate")["errnoName"], "ENOSPC");
    assert!(
        message(&json, "usernsCreate").contains(ENOSPC_SENTENCE),
        "{suite}: {}",
        message(&json, "usernsCreate")
    );
    assert!(
        finding_codes(&json).contains(&"USERNS_CREATE_FAILED".to_string()),
        "{suite}: {json:#}"
    );
    let (table, rc) = b.step("table-zero");
    assert_eq!(rc, 1, "{table}");
    assert!(table.contains(ENOSPC_SENTENCE), "{table}");
}

/// 6.1 creates user namespaces but cannot idmap a tmpfs (that came in 6.3):
/// the probe must fail and say so, not blame an errno.
fn assert_userns_passes_and_idmap_fails_saying_tmpfs_needs_6_3(arch: Arch, suite: &'static str) {
    let b = kernel_boot(arch, suite);
    let (json, rc) = b.json("json");
    assert_eq!(
        outcome(&json, "usernsCreate"),
        "PROBE_OUTCOME_PASSED",
        "{}: {}",
        b.suite,
        message(&json, "usernsCreate")
    );
    assert_eq!(outcome(&json, "idmapMount"), "PROBE_OUTCOME_FAILED");
    let why = message(&json, "idmapMount");
    assert!(
        why.contains("tmpfs") && why.contains("6.3"),
        "{}: the idmap failure on 6.1 must say that tmpfs needs kernel ≥ 6.3: {why:?}",
        b.suite
    );
    assert_eq!(finding_codes(&json), ["IDMAP_MOUNT_FAILED"]);
    assert_eq!(rc, 1);
    let (table, _) = b.step("table");
    assert!(table.contains("✓ user namespace creation"), "{table}");
    assert!(table.contains("✗ idmapped mount (tmpfs)"), "{table}");
}

/// `serve` on its default listen address still listens when the kernel has
/// no IPv6 (it falls back to 0.0.0.0), and answers `check` (the operator
/// build's) on 127.0.0.1 at check's default port; the node build refuses
/// `check` with one line and exit 2.
fn assert_serve_listens_with_ipv6_disabled(arch: Arch) {
    let b = kernel_boot(arch, SERVE_SUITE);
    assert_eq!(
        b.value("IPV6"),
        ["off"],
        "{}: ipv6.disable=1 did not take",
        b.suite
    );
    let (log, _) = b.step("serve-log");
    let addrs: Vec<std::net::SocketAddr> = log.lines().filter_map(common::listening_addr).collect();
    assert!(
        addrs.iter().any(|a| a.is_ipv4() && a.ip().is_unspecified()),
        "{}: serve must listen on 0.0.0.0 when IPv6 is disabled; it logged:\n{log}",
        b.suite
    );
    let (json, rc) = b.json("check");
    let node = &json["nodes"][0];
    assert!(
        node["error"].is_null() && node["report"].is_object(),
        "{}: check got no report from the agent (exit {rc}): {node:#}\nserve log:\n{log}",
        b.suite
    );
    assert_eq!(rc, 0, "{json:#}");
    let (out, rc) = b.step("check-node");
    let (err, _) = b.step("check-node.stderr");
    assert_eq!(rc, 2, "{}: the node build's check: {out}{err}", b.suite);
    assert!(
        out.trim().is_empty()
            && err.trim().lines().count() == 1
            && err.contains("operator build of the same crate"),
        "{}: the node build's check must say in one line where check is: {out}{err}",
        b.suite
    );
}

// -------------------------------------------------------------------- tests

/// The same tests for each architecture, in a module named after it
/// (`x86_64::…`, `aarch64::…`): what one architecture asserts, the other does.
macro_rules! kernel_tests {
    ($module:ident, $arch:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn kernel_6_12_converges_at_the_default_limit() {
                assert_converges($arch, "trixie");
            }

            #[test]
            fn kernel_6_12_limit_zero_exits_1_with_enospc() {
                assert_limit_zero_is_enospc($arch, "trixie");
            }

            #[test]
            fn newest_kernel_converges_at_the_default_limit() {
                assert_converges($arch, "sid");
            }

            #[test]
            fn newest_kernel_limit_zero_exits_1_with_enospc() {
                assert_limit_zero_is_enospc($arch, "sid");
            }

            #[test]
            fn kernel_6_1_userns_passes_and_idmap_fails_saying_tmpfs_needs_6_3() {
                assert_userns_passes_and_idmap_fails_saying_tmpfs_needs_6_3($arch, "bookworm");
            }

            #[test]
            fn kernel_6_1_limit_zero_exits_1_with_enospc() {
                assert_limit_zero_is_enospc($arch, "bookworm");
            }

            #[test]
            fn serve_listens_with_ipv6_disabled() {
                assert_serve_listens_with_ipv6_disabled($arch);
            }
        }
    };
}

kernel_tests!(x86_64, Arch::X86_64);
kernel_tests!(aarch64, Arch::Aarch64);
