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
