//! Tier 5: a real sandbox smoke test (`runsc do true`), run on demand.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::CAPTURE;
use crate::observe::probe;
use crate::proto::v1::{Probe, ProbeOutcome};
use crate::{
    hostio::{self, describe_status, last_line, minimal_env, Ran},
    text::report_line,
};

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
                    report_line(p)
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

    let cgroups_before = tokio::task::spawn_blocking(runsc_do_cgroups)
        .await
        .unwrap_or_default();
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
    // `runsc do` creates a cgroup `<hierarchy>/runsc-<6 digits>` in every
    // hierarchy as its sandbox starts, and only its own Destroy removes it.
    // A run killed at its deadline (a platform that hangs: kvm under nested
    // virtualisation) never gets there, nor does one that fails to start its
    // sandbox (ENOSPC at user.max_user_namespaces = 0: runsc removes its own
    // files, not its cgroups); each such probe would leave a cgroup on the
    // host. The ids are the ones runsc's files in our private directory
    // name (`<id>_sandbox:<id>.lock`) and the `runsc-<digits>` cgroups that
    // appeared during the run; runsc's processes are dead by now, and only
    // empty cgroups can be removed (the kernel refuses one with a task):
    // another `runsc do` started in the same second and not yet in its
    // cgroup is the one thing this could touch.
    let mut ids = sandbox_ids(work.path());
    let after = tokio::task::spawn_blocking(runsc_do_cgroups)
        .await
        .unwrap_or_default();
    for id in after {
        if !cgroups_before.contains(&id) && !ids.contains(&id) {
            ids.push(id);
        }
    }
    if !ids.is_empty() {
        let left = tokio::task::spawn_blocking(move || remove_sandbox_cgroups(&ids))
            .await
            .unwrap_or_else(|_| vec!["the cgroup clean-up task failed".into()]);
        if !left.is_empty() {
            result.message.push_str(&format!(
                "; runsc's cgroups could not all be removed: {}",
                left.join(", ")
            ));
        }
    }
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

/// The sandbox ids runsc wrote under `dir` (its lock and state files are
/// named `<sandbox id>_sandbox:<container id>…`), of runsc do's own form
/// `runsc-<digits>` only: an id becomes a path below.
fn sandbox_ids(dir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0u8)];
    let mut seen = 0usize;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > 1024 {
                return ids;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = sandbox_id_of(&name) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            if depth < 3 && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    ids
}

/// `runsc-123456` from `runsc-123456_sandbox:runsc-123456.lock`; None for
/// any other name.
fn sandbox_id_of(file_name: &str) -> Option<String> {
    let (id, _) = file_name.split_once("_sandbox:")?;
    is_runsc_do_id(id).then(|| id.to_string())
}

/// `runsc do`'s sandbox ids: `runsc-` and digits, nothing else (an id
/// becomes a path).
fn is_runsc_do_id(name: &str) -> bool {
    name.strip_prefix("runsc-").is_some_and(|digits| {
        !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The `runsc do` sandbox ids that have a cgroup directly under a cgroup
/// mount now.
fn runsc_do_cgroups() -> Vec<String> {
    let mountinfo =
        hostio::read_capped(Path::new("/proc/self/mountinfo"), 256 * 1024).unwrap_or_default();
    let mut ids = Vec::new();
    for m in cgroup_mounts(&mountinfo) {
        let Ok(entries) = std::fs::read_dir(&m) else {
            continue;
        };
        for e in entries.flatten().take(4096) {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_runsc_do_id(&name) && !ids.contains(&name) {
                ids.push(name);
            }
        }
    }
    ids
}

/// The mount points of the cgroup (v1) and cgroup2 file systems in a
/// mountinfo text.
fn cgroup_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mount_point = left.split_whitespace().nth(4)?;
            // Escaped names (\040 for a space) are never a cgroup mount's.
            ((fstype == "cgroup" || fstype == "cgroup2") && !mount_point.contains('\\'))
                .then(|| PathBuf::from(mount_point))
        })
        .collect()
}

/// Removes `<mount>/<id>` (and any cgroups below it, deepest first) in
/// every cgroup hierarchy. A cgroup with a task left is busy for a moment
/// after its last process was killed: retried for up to a second. Returns
/// what is still there.
fn remove_sandbox_cgroups(ids: &[String]) -> Vec<String> {
    let mountinfo =
        hostio::read_capped(Path::new("/proc/self/mountinfo"), 256 * 1024).unwrap_or_default();
    let mut targets: Vec<PathBuf> = Vec::new();
    for m in cgroup_mounts(&mountinfo) {
        for id in ids {
            let p = m.join(id);
            if p.is_dir() {
                targets.push(p);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        targets.retain(|t| !remove_cgroup_tree(t));
        if targets.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    targets.iter().map(|t| t.display().to_string()).collect()
}

/// rmdir of a cgroup directory and the cgroups below it, deepest first
/// (a cgroup's files go with its directory). True once it is gone.
fn remove_cgroup_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
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

    #[test]
    fn sandbox_ids_are_runsc_do_ids_only() {
        assert_eq!(
            sandbox_id_of("runsc-151925_sandbox:runsc-151925.lock").as_deref(),
            Some("runsc-151925")
        );
        assert_eq!(
            sandbox_id_of("runsc-1_sandbox:runsc-1.state").as_deref(),
            Some("runsc-1")
        );
        for hostile in [
            "../x_sandbox:y",
            "runsc-_sandbox:x",
            "runsc-12/../../etc_sandbox:x",
            "runsc-12a_sandbox:x",
            "other-12_sandbox:x",
            "runsc-151925.lock",
            "config.json",
        ] {
            assert_eq!(sandbox_id_of(hostile), None, "{hostile}");
        }
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("tmp/runsc-do123");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(bundle.join("runsc-42_sandbox:runsc-42.lock"), "").unwrap();
        std::fs::write(bundle.join("config.json"), "{}").unwrap();
        assert_eq!(sandbox_ids(dir.path()), ["runsc-42"]);
    }

    #[test]
    fn cgroup_mounts_from_mountinfo() {
        let text = "\
25 30 0:22 / /sys rw,nosuid - sysfs sysfs rw
27 25 0:24 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
28 27 0:25 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 27 0:28 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
40 30 0:40 / /odd\\040name rw - cgroup cgroup rw,cpu
";
        assert_eq!(
            cgroup_mounts(text),
            [
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/sys/fs/cgroup/pids")
            ]
        );
        assert!(cgroup_mounts("garbage\n\n - \n").is_empty());
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
}
