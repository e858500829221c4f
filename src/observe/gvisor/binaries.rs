//! Tier 1: the `runsc` and `containerd-shim-runsc-v1` binaries, and what
//! `runsc --version` says. The version answer is cached by the observer
//! for as long as the binary's identity (device, inode, size, times) holds.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::process::Command;

use super::CAPTURE;
use crate::observe::off_thread;
use crate::proto::v1::Binary;
use crate::report::names::{RUNSC, RUNSC_SHIM};
use crate::{
    hostio::{self, describe_status, last_line, minimal_env},
    text::report_line,
};

/// Observes `runsc` and `containerd-shim-runsc-v1`, and runs `runsc --version`
/// when runsc is executable (unless `versions` still holds the answer for
/// this very file). Always returns both entries, runsc first.
pub async fn observe_binaries(
    versions: &VersionCache,
    runsc: &Path,
    shim: &Path,
    exec_timeout: Duration,
) -> Vec<Binary> {
    let stat = {
        let (runsc, shim) = (runsc.to_path_buf(), shim.to_path_buf());
        off_thread(move || {
            let r = stat_binary(RUNSC, &runsc);
            let refused = exec_refusal(&runsc);
            (r, refused, stat_binary(RUNSC_SHIM, &shim))
        })
    };
    let (mut r, refused, s) = match stat.await {
        Ok(found) => found,
        Err(e) => {
            let failed = |name, path: &Path| Binary {
                name: String::from(name),
                path: path.display().to_string(),
                error: e.clone(),
                ..Binary::default()
            };
            return vec![failed(RUNSC, runsc), failed(RUNSC_SHIM, shim)];
        }
    };
    if r.present && r.regular_file && r.executable {
        if let Some(why) = refused {
            r.error = why;
        } else {
            let v = versions.runsc_version(runsc, exec_timeout).await;
            r.version = v.version;
            r.version_raw = v.raw;
            r.error = v.error;
        }
    }
    vec![r, s]
}

/// Why `runsc` must not be executed, if it must not: the agent runs it as
/// root, so whoever may replace or rewrite it would run code as root. It
/// and the directories holding it (the one named and, through a symlink, the
/// real one) must be root-owned and writable by root alone; a directory
/// with the sticky bit may be writable by others (they cannot replace a
/// file they do not own there).
pub fn exec_refusal(runsc: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(runsc).unwrap_or_else(|_| runsc.to_path_buf());
    let mut checks = vec![(real.clone(), false)];
    for dir in [runsc.parent(), real.parent()].into_iter().flatten() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if !checks.iter().any(|(p, _)| p == dir) {
            checks.push((dir.to_path_buf(), true));
        }
    }
    for (path, is_dir) in checks {
        let m = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                return Some(format!(
                    "not executed: cannot check {}: {e}",
                    path.display()
                ))
            }
        };
        let mode = m.mode() & 0o7777;
        let what = if is_dir { "its directory " } else { "" };
        let why = if m.uid() != 0 {
            format!("is owned by uid {}, not root", m.uid())
        } else if mode & 0o022 != 0 && !(is_dir && mode & 0o1000 != 0) {
            format!("is writable by group or others (mode {mode:04o})")
        } else {
            continue;
        };
        return Some(format!(
            "not executed: {what}{} {why}; the agent runs runsc only when it and its directory are root-owned and writable by root alone",
            path.display()
        ));
    }
    None
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

/// The last good `runsc --version` answer, and the identity of the file
/// that gave it.
///
/// `runsc --version` costs a Go process start (tens of milliseconds, most of
/// an observation), and its answer cannot change while the file does not:
/// the last good answer is kept for as long as the binary's identity holds.
/// Owned by the observer, so each observer (and each test) has its own.
#[derive(Debug, Default)]
pub struct VersionCache(Mutex<Option<(FileKey, VersionResult)>>);

impl VersionCache {
    async fn runsc_version(&self, runsc: &Path, timeout: Duration) -> VersionResult {
        let key = {
            let runsc = runsc.to_path_buf();
            off_thread(move || file_key(&runsc)).await.ok().flatten()
        };
        if let Some(key) = &key {
            let cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, v)) = cache.as_ref().filter(|(k, _)| k == key) {
                return v.clone();
            }
        }
        let v = runsc_version(runsc, timeout).await;
        // Only a clean answer for an unchanged file is worth keeping.
        let again = {
            let runsc = runsc.to_path_buf();
            off_thread(move || file_key(&runsc)).await.ok().flatten()
        };
        if v.error.is_empty() && key.is_some() && key == again {
            if let Some(key) = key {
                *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((key, v.clone()));
            }
        }
        v
    }
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
    let raw = report_line(first);
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
        assert_eq!(raw.chars().count(), crate::text::REPORT_LINE_CHARS + 1);
        assert!(raw.ends_with('…'));
    }
}
