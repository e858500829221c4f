//! gVisor, tier by tier: the `runsc` and shim binaries, the CRI drop-ins that
//! register the handler, the host preconditions runsc needs, and a real
//! sandbox smoke test (`runsc do true`).
//!
//! The live CRI tier is in [`super::cri`]; the verdict over all tiers is
//! [`crate::summary::gvisor_readiness`].
//!
//! Every external process runs in its own process group with a cleared
//! environment and a deadline; on timeout the whole group is killed, because
//! runsc forks a gofer and a sandbox and a hung one must not outlive the probe.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::probe;
use crate::host::HostPaths;
use crate::hostio::{
    self, clean_line, describe_status, last_line, minimal_env, Capture, Keep, Ran,
};
use crate::proto::v1::{
    Binary, ConfiguredHandler, DropIn, Precondition, Probe, ProbeOutcome, Sysctl, SysctlState,
};

/// The gVisor runtime binary.
pub const RUNSC: &str = "runsc";
/// The containerd shim containerd derives from `io.containerd.runsc.v1`.
pub const RUNSC_SHIM: &str = "containerd-shim-runsc-v1";
/// The `runtime_type` of a gVisor handler.
pub const RUNSC_RUNTIME_TYPE: &str = "io.containerd.runsc.v1";
/// The CRI runtime plugin key of containerd 2 (config version 3, Talos >= 1.8).
pub const PLUGIN_CRI_V1_RUNTIME: &str = "io.containerd.cri.v1.runtime";
/// The CRI plugin key of containerd 1.x (config version 2).
pub const PLUGIN_GRPC_V1_CRI: &str = "io.containerd.grpc.v1.cri";
const PLUGIN_KEYS: [&str; 2] = [PLUGIN_CRI_V1_RUNTIME, PLUGIN_GRPC_V1_CRI];

/// Drop-ins (and ConfigPath files) larger than this are refused: real ones
/// are a few hundred bytes, and the agent must not be made to buffer a disk.
pub const MAX_DROP_IN_BYTES: usize = 1 << 20;
/// At most this many drop-ins are read from the CRI config directory.
pub const MAX_DROP_IN_FILES: usize = 128;

/// Precondition names, as reported in [`Precondition::name`].
pub const PRECONDITION_MAX_USER_NAMESPACES: &str = "user.max_user_namespaces";
pub const PRECONDITION_PTRACE_SCOPE: &str = "kernel.yama.ptrace_scope";
pub const PRECONDITION_KVM: &str = "/dev/kvm";

/// runsc needs one user namespace for the gofer and one for the sandbox.
const MIN_USER_NAMESPACES: i64 = 2;
/// Scope 3 forbids ptrace entirely, which breaks the systrap and ptrace platforms.
const MAX_PTRACE_SCOPE: i64 = 2;

/// How much of a child's stdout (head: the version line) and stderr (tail:
/// the error is at the end) is kept.
const CAPTURE: Capture = Capture {
    stdout: Keep::Head(64 * 1024),
    stderr: Keep::Tail(64 * 1024),
    kill_group_after_exit: false,
};

/// Default `runsc` location: where the Talos gVisor extension installs it.
pub fn default_runsc_path(host: &HostPaths) -> PathBuf {
    host.default_bin_dir().join(RUNSC)
}

/// Default `containerd-shim-runsc-v1` location.
pub fn default_shim_path(host: &HostPaths) -> PathBuf {
    host.default_bin_dir().join(RUNSC_SHIM)
}

// ---------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------

/// Observes `runsc` and `containerd-shim-runsc-v1`, and runs `runsc --version`
/// when runsc is executable. Always returns both entries, runsc first.
pub async fn observe_binaries(runsc: &Path, shim: &Path, exec_timeout: Duration) -> Vec<Binary> {
    let mut r = stat_binary(RUNSC, runsc);
    if r.present && r.regular_file && r.executable {
        let v = cached_runsc_version(runsc, exec_timeout).await;
        r.version = v.version;
        r.version_raw = v.raw;
        r.error = v.error;
    }
    vec![r, stat_binary(RUNSC_SHIM, shim)]
}

fn stat_binary(name: &str, path: &Path) -> Binary {
    let mut b = Binary {
        name: name.to_string(),
        path: path.display().to_string(),
        ..Binary::default()
    };
    // metadata() follows symlinks: what matters is what exec would run.
    match std::fs::metadata(path) {
        Ok(m) => {
            let mode = m.permissions().mode();
            b.present = true;
            b.regular_file = m.is_file();
            // Root may execute a file when any execute bit is set.
            b.executable = b.regular_file && mode & 0o111 != 0;
            // runsc re-executes itself as an unprivileged user inside the
            // sandbox, so others need read and execute (gVisor FAQ: a+rx).
            b.world_executable = b.regular_file && mode & 0o005 == 0o005;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => b.error = format!("cannot stat {}: {e}", path.display()),
    }
    b
}

#[derive(Debug, Clone)]
struct VersionResult {
    version: String,
    raw: String,
    error: String,
}

/// Identity of a binary on disk: a replaced or rewritten file changes it.
type FileKey = (PathBuf, u64, u64, u64, i64, i64, i64, i64);

fn file_key(path: &Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((
        path.to_path_buf(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

/// `runsc --version` costs a Go process start (tens of milliseconds, most of
/// an observation), and its answer cannot change while the file does not:
/// the last good answer is kept for as long as the binary's identity holds.
async fn cached_runsc_version(runsc: &Path, timeout: Duration) -> VersionResult {
    static CACHE: std::sync::Mutex<Option<(FileKey, VersionResult)>> = std::sync::Mutex::new(None);
    let key = file_key(runsc);
    if let Some(key) = &key {
        let cache = CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, v)) = cache.as_ref().filter(|(k, _)| k == key) {
            return v.clone();
        }
    }
    let v = runsc_version(runsc, timeout).await;
    // Only a clean answer for an unchanged file is worth keeping.
    if v.error.is_empty() && key.is_some() && key == file_key(runsc) {
        if let Some(key) = key {
            *CACHE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((key, v.clone()));
        }
    }
    v
}

async fn runsc_version(runsc: &Path, timeout: Duration) -> VersionResult {
    let mut cmd = Command::new(runsc);
    cmd.arg("--version");
    minimal_env(&mut cmd);
    let mut res = VersionResult {
        version: String::new(),
        raw: String::new(),
        error: String::new(),
    };
    let ran = match hostio::run(cmd, timeout, CAPTURE, None).await {
        Ok(ran) => ran,
        Err(e) => {
            res.error = format!("could not execute {} --version: {e}", runsc.display());
            return res;
        }
    };
    let (version, raw) = parse_runsc_version(&String::from_utf8_lossy(&ran.stdout));
    res.version = version;
    res.raw = raw;
    if ran.timed_out {
        res.error = format!(
            "{} --version did not finish within {}; its process group was killed",
            runsc.display(),
            humantime::format_duration(timeout)
        );
    } else if let Some(status) = ran.status.filter(|s| !s.success()) {
        res.error = format!(
            "{} --version {}{}",
            runsc.display(),
            describe_status(status),
            last_line_suffix(&ran.stderr)
        );
    } else if ran.status.is_none() {
        res.error = format!("{} --version could not be reaped", runsc.display());
    }
    res
}

fn last_line_suffix(bytes: &[u8]) -> String {
    let l = last_line(bytes);
    if l.is_empty() {
        l
    } else {
        format!(": {l}")
    }
}

/// Parses `runsc --version` output: `(version, raw first line)`.
///
/// `runsc version release-20240722.0` gives `release-20240722.0`; source
/// builds print `VERSION_MISSING`, which is returned as is. Anything else
/// gives an empty version; the raw first non-empty line is kept (control
/// characters replaced, at most 256 characters) so a person can see it.
pub fn parse_runsc_version(stdout: &str) -> (String, String) {
    let first = stdout
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let raw = clean_line(first);
    let version = first
        .strip_prefix("runsc version")
        .filter(|rest| rest.starts_with(char::is_whitespace))
        .and_then(|rest| {
            let mut words = rest.split_whitespace();
            let v = words.next()?;
            words.next().is_none().then_some(v)
        })
        .filter(|v| v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or("")
        .to_string();
    (version, raw)
}

// ---------------------------------------------------------------------------
// CRI drop-ins
// ---------------------------------------------------------------------------

/// What the I/O side knows about a handler's `ConfigPath` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigLookup {
    pub exists: bool,
    /// `[runsc_config] platform`, empty when unset (runsc then uses systrap).
    pub platform: String,
}

/// Reads every `*.part` and `*.toml` file in `conf_dir` (sorted by name) and
/// returns one [`DropIn`] per file plus the runtime handlers they register.
///
/// A handler declared again by a later file (Talos' merged `cri.toml` repeats
/// every part) is merged into the first declaration, later values winning
/// like containerd's own TOML merge. A missing directory yields nothing.
pub fn observe_drop_ins(
    conf_dir: &Path,
    host: &HostPaths,
) -> (Vec<DropIn>, Vec<ConfiguredHandler>) {
    let mut drop_ins = Vec::new();
    let files = match list_drop_ins(conf_dir) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (drop_ins, Vec::new()),
        Err(e) => {
            drop_ins.push(DropIn {
                path: conf_dir.display().to_string(),
                parsed: false,
                error: format!("cannot list the CRI drop-in directory: {e}"),
            });
            return (drop_ins, Vec::new());
        }
    };
    let (files, skipped) = if files.len() > MAX_DROP_IN_FILES {
        let skipped = files.len() - MAX_DROP_IN_FILES;
        (files[..MAX_DROP_IN_FILES].to_vec(), skipped)
    } else {
        (files, 0)
    };

    // ConfigPath files are read once each, even when several handlers or a
    // merged cri.toml name the same one.
    let mut cache: HashMap<String, ConfigLookup> = HashMap::new();
    let mut config_errors: Vec<DropIn> = Vec::new();
    let mut lookup = |config_path: &str| -> ConfigLookup {
        if let Some(hit) = cache.get(config_path) {
            return hit.clone();
        }
        let resolved = host.host(config_path);
        let found = match hostio::read_capped(&resolved, MAX_DROP_IN_BYTES) {
            Ok(text) => match runsc_platform(&text) {
                Ok(platform) => ConfigLookup {
                    exists: true,
                    platform,
                },
                Err(e) => {
                    config_errors.push(DropIn {
                        path: resolved.display().to_string(),
                        parsed: false,
                        error: format!("ConfigPath {config_path} is malformed: {e}"),
                    });
                    ConfigLookup {
                        exists: true,
                        platform: String::new(),
                    }
                }
            },
            Err(e) if e.is_not_found() => ConfigLookup::default(),
            Err(e) => {
                config_errors.push(DropIn {
                    path: resolved.display().to_string(),
                    parsed: false,
                    error: format!("ConfigPath {config_path} cannot be read: {}", e.reason()),
                });
                ConfigLookup {
                    exists: true,
                    platform: String::new(),
                }
            }
        };
        cache.insert(config_path.to_string(), found.clone());
        found
    };

    let mut merged: Vec<ConfiguredHandler> = Vec::new();
    for file in &files {
        let path = file.display().to_string();
        let parsed = hostio::read_capped(file, MAX_DROP_IN_BYTES)
            .map_err(|e| format!("cannot read: {}", e.reason()))
            .and_then(|text| handlers_from_drop_in(&text, &path, &mut lookup));
        match parsed {
            Ok(handlers) => {
                drop_ins.push(DropIn {
                    path,
                    parsed: true,
                    error: String::new(),
                });
                for h in handlers {
                    merge_handler(&mut merged, h);
                }
            }
            Err(error) => drop_ins.push(DropIn {
                path,
                parsed: false,
                error,
            }),
        }
    }
    if skipped > 0 {
        drop_ins.push(DropIn {
            path: conf_dir.display().to_string(),
            parsed: false,
            error: format!(
                "{skipped} more drop-ins were not read (limit {MAX_DROP_IN_FILES} files)"
            ),
        });
    }
    // A malformed ConfigPath file inside the directory already has its entry.
    for e in config_errors {
        match drop_ins.iter_mut().find(|d| d.path == e.path) {
            Some(d) if !d.parsed => {}
            Some(d) => {
                d.parsed = false;
                d.error = e.error;
            }
            None => drop_ins.push(e),
        }
    }
    (drop_ins, merged)
}

fn merge_handler(into: &mut Vec<ConfiguredHandler>, h: ConfiguredHandler) {
    let Some(prev) = into
        .iter_mut()
        .find(|p| p.name == h.name && p.plugin_key == h.plugin_key)
    else {
        into.push(h);
        return;
    };
    if !h.runtime_type.is_empty() {
        prev.runtime_type = h.runtime_type;
    }
    if !h.config_path.is_empty() {
        prev.config_path = h.config_path;
        prev.config_path_exists = h.config_path_exists;
        prev.platform = h.platform;
    }
}

fn list_drop_ins(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "part" || e == "toml");
        // metadata() follows symlinks; a directory named x.toml is not a drop-in.
        if wanted && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A TOML parse error as one line: `line N, column M: message`.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("TOML error at line {line}, column {column}: {msg}")
        }
        None => format!("TOML error: {msg}"),
    }
}

/// The runtime handlers one drop-in declares, under both CRI plugin keys.
///
/// Pure: `lookup` answers for each non-empty `options.ConfigPath` (a host
/// path) whether the file exists and which platform it sets. Values of the
/// wrong TOML type are errors, as they would be for containerd.
pub fn handlers_from_drop_in(
    text: &str,
    source: &str,
    lookup: &mut dyn FnMut(&str) -> ConfigLookup,
) -> Result<Vec<ConfiguredHandler>, String> {
    let doc: toml::Table = text.parse().map_err(|e| toml_error(text, &e))?;
    let Some(plugins) = doc.get("plugins") else {
        return Ok(Vec::new());
    };
    let plugins = as_table(plugins, "plugins")?;
    let mut out = Vec::new();
    for key in PLUGIN_KEYS {
        let Some(plugin) = plugins.get(key) else {
            continue;
        };
        let at = format!("plugins.\"{key}\"");
        let plugin = as_table(plugin, &at)?;
        let Some(containerd) = plugin.get("containerd") else {
            continue;
        };
        let at = format!("{at}.containerd");
        let containerd = as_table(containerd, &at)?;
        let Some(runtimes) = containerd.get("runtimes") else {
            continue;
        };
        let at = format!("{at}.runtimes");
        for (name, runtime) in as_table(runtimes, &at)? {
            let at = format!("{at}.{name}");
            let runtime = as_table(runtime, &at)?;
            let runtime_type = opt_str(runtime, "runtime_type", &at)?;
            let config_path = match runtime.get("options") {
                Some(opts) => {
                    let at = format!("{at}.options");
                    opt_str(as_table(opts, &at)?, "ConfigPath", &at)?
                }
                None => String::new(),
            };
            let found = if config_path.is_empty() {
                ConfigLookup::default()
            } else {
                lookup(&config_path)
            };
            out.push(ConfiguredHandler {
                name: name.clone(),
                plugin_key: key.to_string(),
                runtime_type,
                config_path,
                config_path_exists: found.exists,
                platform: found.platform,
                source: source.to_string(),
            });
        }
    }
    Ok(out)
}

/// `[runsc_config] platform` of a runsc shim config file; empty when unset.
pub fn runsc_platform(text: &str) -> Result<String, String> {
    let doc: toml::Table = text.parse().map_err(|e| toml_error(text, &e))?;
    let Some(cfg) = doc.get("runsc_config") else {
        return Ok(String::new());
    };
    opt_str(as_table(cfg, "runsc_config")?, "platform", "runsc_config")
}

fn as_table<'a>(v: &'a toml::Value, at: &str) -> Result<&'a toml::Table, String> {
    v.as_table()
        .ok_or_else(|| format!("{at} is a {}, not a table", v.type_str()))
}

fn opt_str(t: &toml::Table, key: &str, at: &str) -> Result<String, String> {
    match t.get(key) {
        None => Ok(String::new()),
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(format!("{at}.{key} is a {}, not a string", v.type_str())),
    }
}

// ---------------------------------------------------------------------------
// Host preconditions
// ---------------------------------------------------------------------------

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

/// runsc's host preconditions, decided from observed data only.
///
/// The `/dev/kvm` entry is present only when some handler's platform is kvm.
pub fn preconditions(
    sysctls: &[Sysctl],
    handlers: &[ConfiguredHandler],
    kvm_present: Option<bool>,
) -> Vec<Precondition> {
    let mut out = vec![
        max_user_namespaces(find_sysctl(sysctls, PRECONDITION_MAX_USER_NAMESPACES)),
        ptrace_scope(find_sysctl(sysctls, PRECONDITION_PTRACE_SCOPE)),
    ];
    let mut kvm_handlers: Vec<&str> = handlers
        .iter()
        .filter(|h| h.platform == "kvm")
        .map(|h| h.name.as_str())
        .collect();
    kvm_handlers.sort_unstable();
    kvm_handlers.dedup();
    if !kvm_handlers.is_empty() {
        let who = format!(
            "handler{} {} use{} the kvm platform",
            if kvm_handlers.len() == 1 { "" } else { "s" },
            kvm_handlers.join(", "),
            if kvm_handlers.len() == 1 { "s" } else { "" },
        );
        out.push(match kvm_present {
            Some(true) => precondition(
                PRECONDITION_KVM,
                true,
                true,
                format!("{who}, and /dev/kvm is present"),
            ),
            Some(false) => precondition(
                PRECONDITION_KVM,
                false,
                true,
                format!("{who}, but /dev/kvm is absent"),
            ),
            None => precondition(
                PRECONDITION_KVM,
                false,
                false,
                format!("{who}; whether /dev/kvm exists could not be checked"),
            ),
        });
    }
    out
}

fn precondition(name: &str, satisfied: bool, known: bool, detail: String) -> Precondition {
    Precondition {
        name: name.to_string(),
        satisfied,
        known,
        detail,
    }
}

fn find_sysctl<'a>(sysctls: &'a [Sysctl], name: &str) -> Option<&'a Sysctl> {
    sysctls.iter().find(|s| s.name == name)
}

/// The integer value of a present sysctl, or why there is none.
fn sysctl_int(s: Option<&Sysctl>, name: &str) -> Result<i64, String> {
    let Some(s) = s else {
        return Err(format!("{name} was not observed"));
    };
    match SysctlState::try_from(s.state) {
        Ok(SysctlState::Present) => s.value.trim().parse::<i64>().map_err(|_| {
            format!(
                "{name} has the value {:?}, which is not a number",
                clean_line(&s.value)
            )
        }),
        Ok(SysctlState::Absent) => Err(format!("{name} does not exist on this kernel")),
        Ok(SysctlState::Unreadable) => Err(format!("{name} could not be read: {}", s.error)),
        _ => Err(format!("{name} has no observed state")),
    }
}

fn max_user_namespaces(s: Option<&Sysctl>) -> Precondition {
    let name = PRECONDITION_MAX_USER_NAMESPACES;
    match sysctl_int(s, name) {
        Ok(v) if v >= MIN_USER_NAMESPACES => precondition(
            name,
            true,
            true,
            format!("{name} is {v}; runsc needs at least {MIN_USER_NAMESPACES} (one user namespace for the gofer, one for the sandbox)"),
        ),
        Ok(v) => precondition(
            name,
            false,
            true,
            format!("{name} is {v}; runsc needs at least {MIN_USER_NAMESPACES} (one user namespace for the gofer, one for the sandbox)"),
        ),
        Err(why) => precondition(name, false, false, why),
    }
}

fn ptrace_scope(s: Option<&Sysctl>) -> Precondition {
    let name = PRECONDITION_PTRACE_SCOPE;
    if s.is_some_and(|s| s.state == SysctlState::Absent as i32) {
        return precondition(
            name,
            true,
            true,
            "Yama is not enabled on this kernel, so ptrace is not restricted".to_string(),
        );
    }
    match sysctl_int(s, name) {
        Ok(v) if v <= MAX_PTRACE_SCOPE => precondition(
            name,
            true,
            true,
            format!("{name} is {v}; runsc's systrap platform needs at most {MAX_PTRACE_SCOPE}"),
        ),
        Ok(v) => precondition(
            name,
            false,
            true,
            format!("{name} is {v}; runsc's systrap platform needs at most {MAX_PTRACE_SCOPE} (3 forbids ptrace entirely)"),
        ),
        Err(why) => precondition(name, false, false, why),
    }
}

// ---------------------------------------------------------------------------
// Sandbox smoke probe
// ---------------------------------------------------------------------------

/// Starts a real sandbox: `runsc --network=none [--rootless]
/// [--platform=P] --root <private dir> do true`.
///
/// `rootless` is for an agent outside the initial user namespace (there,
/// runsc without it fails with EPERM). runsc's state (`--root`) and the
/// bundle `runsc do` writes to `$TMPDIR` live in one private directory that
/// is removed afterwards, also after a timeout, when runsc's process group
/// and any sandbox process that named that directory are killed.
pub async fn sandbox_probe(
    runsc: &Path,
    rootless: bool,
    platform: Option<&str>,
    timeout: Duration,
) -> Probe {
    let started = Instant::now();
    let platform = platform.map(str::trim).filter(|p| !p.is_empty());
    if let Some(p) = platform {
        let valid = p.len() <= 32
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !valid {
            return probe(
                ProbeOutcome::Error,
                libc::EINVAL,
                format!(
                    "refusing to run runsc with the platform {:?}",
                    clean_line(p)
                ),
                started.elapsed(),
            );
        }
    }
    let work = match PrivateDir::create() {
        Ok(w) => w,
        Err(e) => {
            return probe(
                ProbeOutcome::Error,
                e.raw_os_error().unwrap_or(0),
                format!(
                    "cannot create a private directory for runsc under {}: {e}",
                    std::env::temp_dir().display()
                ),
                started.elapsed(),
            )
        }
    };

    let mut shown = String::from("runsc --network=none");
    let mut cmd = Command::new(runsc);
    cmd.arg("--network=none");
    if rootless {
        cmd.arg("--rootless");
        shown.push_str(" --rootless");
    }
    if let Some(p) = platform {
        cmd.arg(format!("--platform={p}"));
        shown.push_str(&format!(" --platform={p}"));
    }
    shown.push_str(" do true");
    cmd.arg("--root").arg(work.state_dir()).args(["do", "true"]);
    minimal_env(&mut cmd);
    // `runsc do` writes its bundle under os.TempDir(); keep it in our dir so
    // a killed run leaves nothing behind.
    cmd.env("TMPDIR", work.tmp_dir());
    cmd.current_dir("/");

    let ran = hostio::run(cmd, timeout, CAPTURE, Some(work.path())).await;
    let mut result = match ran {
        Err(e) => probe(
            ProbeOutcome::Error,
            e.raw_os_error().unwrap_or(0),
            format!("could not execute {}: {e}", runsc.display()),
            started.elapsed(),
        ),
        Ok(ran) => classify_sandbox_run(&shown, &ran, timeout),
    };
    if let Err(e) = work.remove() {
        result.message.push_str(&format!(
            "; its private directory could not be removed: {e}"
        ));
    }
    result
}

fn classify_sandbox_run(shown: &str, ran: &Ran, timeout: Duration) -> Probe {
    let line = last_line(&ran.stderr);
    if ran.timed_out {
        let mut msg = format!(
            "`{shown}` did not finish within {}; its process group was killed",
            humantime::format_duration(timeout)
        );
        if !line.is_empty() {
            msg.push_str(&format!(" (last error line: {line})"));
        }
        return probe(ProbeOutcome::Error, libc::ETIMEDOUT, msg, ran.elapsed);
    }
    match ran.status {
        Some(s) if s.success() => probe(
            ProbeOutcome::Passed,
            0,
            format!("`{shown}` started a sandbox and exited 0"),
            ran.elapsed,
        ),
        Some(s) => {
            let errno = errno_in_line(&line);
            let mut msg = format!("`{shown}` {}", describe_status(s));
            if !line.is_empty() {
                msg.push_str(&format!(": {line}"));
            }
            match errno {
                libc::ENOSPC => msg.push_str(" (user.max_user_namespaces limit reached?)"),
                libc::EPERM if !shown.contains("--rootless") => msg.push_str(
                    " (not in the initial user namespace, or a security policy forbids it?)",
                ),
                _ => {}
            }
            probe(ProbeOutcome::Failed, errno, msg, ran.elapsed)
        }
        None => probe(
            ProbeOutcome::Error,
            0,
            format!("`{shown}` ended but could not be reaped"),
            ran.elapsed,
        ),
    }
}

/// The errno whose strerror text (as Go prints it) ends runsc's error line.
fn errno_in_line(line: &str) -> i32 {
    const TEXTS: [(&str, i32); 7] = [
        ("no space left on device", libc::ENOSPC),
        ("operation not permitted", libc::EPERM),
        ("permission denied", libc::EACCES),
        ("no such file or directory", libc::ENOENT),
        ("invalid argument", libc::EINVAL),
        ("function not implemented", libc::ENOSYS),
        ("resource temporarily unavailable", libc::EAGAIN),
    ];
    let lower = line.to_ascii_lowercase();
    TEXTS
        .iter()
        .filter_map(|(t, e)| lower.rfind(t).map(|at| (at, *e)))
        .max_by_key(|(at, _)| *at)
        .map_or(0, |(_, e)| e)
}

/// A mode-0711 directory under the temp dir holding runsc's state dir and
/// TMPDIR. Others may traverse but not list it: runsc's sandbox runs as an
/// unprivileged user and must reach the bundle (a 0700 parent makes root
/// runsc fail with "cannot read client sync file ... EOF").
struct PrivateDir {
    path: PathBuf,
    removed: bool,
}

impl PrivateDir {
    fn create() -> io::Result<Self> {
        let base = std::env::temp_dir();
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..8 {
            let path = base.join(format!(
                "sandbox-readiness-runsc-{:016x}",
                fastrand::u64(..)
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    let dir = Self {
                        path,
                        removed: false,
                    };
                    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o711))?;
                    for sub in [dir.state_dir(), dir.tmp_dir()] {
                        std::fs::create_dir(&sub)?;
                        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700))?;
                    }
                    return Ok(dir);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn state_dir(&self) -> PathBuf {
        self.path.join("state")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.path.join("tmp")
    }

    fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if !self.removed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runsc_version_lines() {
        let cases = [
            (
                "runsc version release-20240722.0\nspec: 1.1.0-rc.1\n",
                "release-20240722.0",
                "runsc version release-20240722.0",
            ),
            (
                "runsc version VERSION_MISSING\nspec: 1.1.0\n",
                "VERSION_MISSING",
                "runsc version VERSION_MISSING",
            ),
            (
                "\n  runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n",
                "0.0~20221219.0",
                "runsc version 0.0~20221219.0",
            ),
            ("runsc version\n", "", "runsc version"),
            ("runsc versionX 1\n", "", "runsc versionX 1"),
            ("runsc version a b\n", "", "runsc version a b"),
            ("Usage: runsc <flags>\n", "", "Usage: runsc <flags>"),
            ("", "", ""),
            (
                "runsc version \u{1b}[31mred\n",
                "",
                "runsc version ?[31mred",
            ),
        ];
        for (out, version, raw) in cases {
            assert_eq!(
                parse_runsc_version(out),
                (version.to_string(), raw.to_string()),
                "{out:?}"
            );
        }
    }

    #[test]
    fn garbage_version_output_is_capped() {
        let long = "x".repeat(10_000);
        let (v, raw) = parse_runsc_version(&long);
        assert_eq!(v, "");
        assert_eq!(raw.chars().count(), hostio::child::MAX_LINE_CHARS + 1);
        assert!(raw.ends_with('…'));
    }

    const TALOS_PART: &str = r#"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "/etc/cri/conf.d/runsc.toml"
"#;

    fn no_lookup(_: &str) -> ConfigLookup {
        ConfigLookup::default()
    }

    #[test]
    fn talos_part_declares_runsc() {
        let mut asked = Vec::new();
        let mut lookup = |p: &str| {
            asked.push(p.to_string());
            ConfigLookup {
                exists: true,
                platform: "kvm".into(),
            }
        };
        let hs = handlers_from_drop_in(TALOS_PART, "/x/10-gvisor.part", &mut lookup).unwrap();
        assert_eq!(asked, ["/etc/cri/conf.d/runsc.toml"]);
        assert_eq!(
            hs,
            [ConfiguredHandler {
                name: "runsc".into(),
                plugin_key: PLUGIN_CRI_V1_RUNTIME.into(),
                runtime_type: RUNSC_RUNTIME_TYPE.into(),
                config_path: "/etc/cri/conf.d/runsc.toml".into(),
                config_path_exists: true,
                platform: "kvm".into(),
                source: "/x/10-gvisor.part".into(),
            }]
        );
    }

    #[test]
    fn containerd_1_key_and_no_options() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n";
        let hs = handlers_from_drop_in(text, "s", &mut no_lookup).unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0].plugin_key, PLUGIN_GRPC_V1_CRI);
        assert_eq!(hs[0].config_path, "");
        assert!(!hs[0].config_path_exists);
    }

    #[test]
    fn unrelated_toml_declares_nothing() {
        for text in [
            "",
            "[runsc_config]\n  platform = \"kvm\"\n",
            "[debug]\n level = \"debug\"\n[plugins.\"io.containerd.runtime.v1.linux\"]\n shim_debug = true\n",
            "[plugins.\"io.containerd.cri.v1.images\".registry]\nconfig_path = \"/etc/cri/conf.d/hosts\"\n",
        ] {
            assert_eq!(handlers_from_drop_in(text, "s", &mut no_lookup), Ok(vec![]), "{text}");
        }
    }

    #[test]
    fn malformed_and_mistyped_drop_ins_are_one_line_errors() {
        let cases = [
            ("[plugins.\"io.containerd.cri.v1.runtime\"\n", "line 1"),
            ("a = 1\nb = = 2\n", "line 2"),
            ("plugins = 3\n", "plugins is a integer, not a table"),
            (
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd]\nruntimes = \"x\"\n",
                "runtimes is a string, not a table",
            ),
            (
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc]\nruntime_type = 1\n",
                "runsc.runtime_type is a integer, not a string",
            ),
            (
                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc.options]\nConfigPath = [\"a\"]\n",
                "options.ConfigPath is a array, not a string",
            ),
        ];
        for (text, needle) in cases {
            let err = handlers_from_drop_in(text, "s", &mut no_lookup).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err:?}");
        }
    }

    #[test]
    fn runsc_config_platform() {
        assert_eq!(runsc_platform("[runsc_config]\n").unwrap(), "");
        assert_eq!(runsc_platform("").unwrap(), "");
        assert_eq!(
            runsc_platform("[runsc_config]\n  platform = \"kvm\"\n").unwrap(),
            "kvm"
        );
        assert_eq!(
            runsc_platform("log_level = \"debug\"\n[runsc_config]\n  debug = \"true\"\n").unwrap(),
            ""
        );
        assert!(runsc_platform("[runsc_config]\nplatform = 1\n").is_err());
        assert!(runsc_platform("runsc_config = 1\n").is_err());
        assert!(runsc_platform("[runsc_config\n").is_err());
    }

    fn present(name: &str, value: &str) -> Sysctl {
        Sysctl {
            name: name.into(),
            state: SysctlState::Present as i32,
            value: value.into(),
            error: String::new(),
        }
    }

    fn with_state(name: &str, state: SysctlState) -> Sysctl {
        Sysctl {
            name: name.into(),
            state: state as i32,
            error: "EACCES".into(),
            ..Sysctl::default()
        }
    }

    fn decide(sysctls: &[Sysctl], name: &str) -> (bool, bool, String) {
        let p = preconditions(sysctls, &[], None)
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        (p.satisfied, p.known, p.detail)
    }

    #[test]
    fn precondition_table() {
        use SysctlState::*;
        let m = PRECONDITION_MAX_USER_NAMESPACES;
        let y = PRECONDITION_PTRACE_SCOPE;
        let cases: Vec<(Vec<Sysctl>, &str, bool, bool, &str)> = vec![
            (vec![present(m, "11255\n")], m, true, true, "is 11255"),
            (vec![present(m, "2")], m, true, true, "is 2"),
            (
                vec![present(m, "1")],
                m,
                false,
                true,
                "is 1; runsc needs at least 2",
            ),
            (vec![present(m, "0")], m, false, true, "one for the sandbox"),
            (vec![present(m, "lots")], m, false, false, "not a number"),
            (
                vec![with_state(m, Unreadable)],
                m,
                false,
                false,
                "could not be read: EACCES",
            ),
            (
                vec![with_state(m, Absent)],
                m,
                false,
                false,
                "does not exist",
            ),
            (vec![], m, false, false, "was not observed"),
            (vec![present(y, "0")], y, true, true, "is 0"),
            (vec![present(y, "2")], y, true, true, "is 2"),
            (vec![present(y, "3")], y, false, true, "3 forbids ptrace"),
            (
                vec![with_state(y, Absent)],
                y,
                true,
                true,
                "Yama is not enabled",
            ),
            (
                vec![with_state(y, Unreadable)],
                y,
                false,
                false,
                "could not be read",
            ),
            (vec![], y, false, false, "was not observed"),
        ];
        for (sysctls, name, satisfied, known, needle) in cases {
            let (s, k, detail) = decide(&sysctls, name);
            assert_eq!((s, k), (satisfied, known), "{name} {sysctls:?}: {detail}");
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
        }
    }

    #[test]
    fn kvm_precondition_only_for_kvm_handlers() {
        let h = |name: &str, platform: &str| ConfiguredHandler {
            name: name.into(),
            platform: platform.into(),
            ..ConfiguredHandler::default()
        };
        let kvm = |hs: &[ConfiguredHandler], present| {
            preconditions(&[], hs, present)
                .into_iter()
                .find(|p| p.name == PRECONDITION_KVM)
        };
        assert!(kvm(&[h("runsc", "")], Some(false)).is_none());
        let both = [h("runsc", ""), h("runsc-kvm", "kvm")];
        let p = kvm(&both, Some(true)).unwrap();
        assert!(p.satisfied && p.known, "{p:?}");
        let p = kvm(&both, Some(false)).unwrap();
        assert!(!p.satisfied && p.known, "{p:?}");
        assert!(
            p.detail
                .contains("handler runsc-kvm uses the kvm platform, but /dev/kvm is absent"),
            "{}",
            p.detail
        );
        let p = kvm(&both, None).unwrap();
        assert!(!p.satisfied && !p.known, "{p:?}");
    }

    #[test]
    fn errno_from_runsc_error_lines() {
        let enospc = "creating container: cannot create sandbox: cannot create sandbox process: starting sandbox: fork/exec /proc/self/exe: no space left on device";
        assert_eq!(errno_in_line(enospc), libc::ENOSPC);
        assert_eq!(
            errno_in_line("fork/exec /proc/self/exe: operation not permitted"),
            libc::EPERM
        );
        assert_eq!(
            errno_in_line("open /dev/kvm: no such file or directory"),
            libc::ENOENT
        );
        // The last errno text names the failing call.
        assert_eq!(
            errno_in_line("permission denied while handling: no space left on device"),
            libc::ENOSPC
        );
        assert_eq!(errno_in_line("unknown platform: nope"), 0);
    }

    #[test]
    fn last_line_skips_blank_lines_and_keeps_the_error() {
        let err = b"W1129 util.go:64] FATAL ERROR: x\nfork/exec /proc/self/exe: no space left on device\n\n  \n";
        assert_eq!(
            last_line(err),
            "fork/exec /proc/self/exe: no space left on device"
        );
        assert_eq!(last_line(b""), "");
    }

    /// A TOML basic string for printable ASCII.
    fn toml_quote(s: &str) -> String {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }

    fn toml_key() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_-]{0,15}"
    }

    fn toml_str() -> impl Strategy<Value = String> {
        // Any printable text, including quotes and backslashes TOML must escape.
        "[ -~]{0,40}"
    }

    proptest! {
        #[test]
        fn walking_never_panics(text in "\\PC{0,400}") {
            let _ = handlers_from_drop_in(&text, "s", &mut no_lookup);
            let _ = runsc_platform(&text);
        }

        #[test]
        fn mutated_talos_part_never_panics(cut in 0usize..400, insert in "[\\[\\]\"=. a-z\n]{0,8}") {
            let mut text = TALOS_PART.to_string();
            let at = cut.min(text.len());
            text.insert_str(at, &insert);
            if let Err(e) = handlers_from_drop_in(&text, "s", &mut no_lookup) {
                prop_assert!(!e.contains('\n'));
            }
        }

        /// Every runtime written under either key is found with its fields,
        /// and ConfigPath is looked up exactly for the handlers that set one.
        #[test]
        fn written_handlers_are_found(
            runtimes in proptest::collection::btree_map(
                toml_key(),
                (0usize..2, toml_str(), proptest::option::of(toml_str())),
                0..6,
            )
        ) {
            let mut text = String::new();
            for (name, (key, rtype, config)) in &runtimes {
                let key = PLUGIN_KEYS[*key];
                text.push_str(&format!(
                    "[plugins.\"{key}\".containerd.runtimes.\"{name}\"]\nruntime_type = {}\n",
                    toml_quote(rtype)
                ));
                if let Some(c) = config {
                    text.push_str(&format!(
                        "[plugins.\"{key}\".containerd.runtimes.\"{name}\".options]\nConfigPath = {}\n",
                        toml_quote(c)
                    ));
                }
            }
            let mut asked = Vec::new();
            let mut lookup = |p: &str| {
                asked.push(p.to_string());
                ConfigLookup { exists: p.len().is_multiple_of(2), platform: format!("p{}", p.len()) }
            };
            let found = handlers_from_drop_in(&text, "src", &mut lookup).unwrap();
            prop_assert_eq!(found.len(), runtimes.len());
            for (name, (key, rtype, config)) in &runtimes {
                let h = found.iter().find(|h| &h.name == name).unwrap();
                prop_assert_eq!(&h.plugin_key, PLUGIN_KEYS[*key]);
                prop_assert_eq!(&h.runtime_type, rtype);
                prop_assert_eq!(&h.source, "src");
                let c = config.clone().unwrap_or_default();
                prop_assert_eq!(&h.config_path, &c);
                if c.is_empty() {
                    prop_assert!(!h.config_path_exists);
                    prop_assert_eq!(&h.platform, "");
                } else {
                    prop_assert_eq!(h.config_path_exists, c.len().is_multiple_of(2));
                    prop_assert_eq!(&h.platform, &format!("p{}", c.len()));
                }
            }
            let wanted = runtimes.values().filter(|(_, _, c)| c.as_ref().is_some_and(|c| !c.is_empty())).count();
            prop_assert_eq!(asked.len(), wanted);
        }
    }
}
