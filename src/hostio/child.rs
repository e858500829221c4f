//! Children under a deadline: each in its own process group, stdin closed,
//! output captured up to a bound, and on timeout the whole group killed.
//!
//! The order matters. A group id is the leader's pid, and once the leader is
//! reaped (and its group empties) the number can be handed to an unrelated
//! process. So the leader's exit is first observed without reaping it
//! (`waitid(WNOWAIT)`), the group is signalled while the leader is still a
//! zombie holding the id, and only then is the leader reaped.

use std::{
    ffi::OsString,
    io,
    path::Path,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use nix::{
    sys::{
        signal::{kill, killpg, Signal},
        wait::{waitid, Id, WaitPidFlag},
    },
    unistd::Pid,
};
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    process::Command,
};

/// How long a killed child gets to be reaped before it is left to tokio's
/// orphan reaper.
const REAP_GRACE: Duration = Duration::from_secs(2);
/// How long the pipes may stay open after the child is gone (a grandchild
/// holding them) before reading stops.
const PIPE_GRACE: Duration = Duration::from_millis(500);
/// Used when the agent itself has no PATH.
const FALLBACK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which end of a stream to keep when it exceeds its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first N bytes (a version line, a document).
    Head(usize),
    /// The last N bytes (an error is at the end of stderr).
    Tail(usize),
}

impl Keep {
    fn bound(self) -> usize {
        match self {
            Self::Head(n) | Self::Tail(n) => n,
        }
    }
}

/// How a run captures output and cleans up.
#[derive(Debug, Clone, Copy)]
pub struct Capture {
    pub stdout: Keep,
    pub stderr: Keep,
    /// Also kill the group after a normal exit of the leader (a shell that
    /// exited while something it started still runs).
    pub kill_group_after_exit: bool,
}

/// What a bounded run produced.
#[derive(Debug)]
pub struct Ran {
    /// `None` when the child could not be reaped after being killed.
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    /// True when stdout produced more than its bound (the rest was read and
    /// dropped, so the child never blocked on a full pipe).
    pub stdout_overflowed: bool,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

/// The PATH [`minimal_env`] gives a child: the agent's own, else a standard one.
pub fn child_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| OsString::from(FALLBACK_PATH))
}

/// Clears the environment of `cmd`, keeping only PATH (or a standard one).
pub fn minimal_env(cmd: &mut Command) {
    cmd.env_clear();
    cmd.env("PATH", child_path());
}

/// Runs `cmd` in its own process group with stdin closed, capturing output
/// as `capture` says, for at most `deadline`. On timeout the group is
/// killed (before the leader is reaped). With `marker`, every process whose
/// command line names it is killed once the child is done (runsc's sandbox
/// calls setsid, leaving the group).
pub async fn run(
    mut cmd: Command,
    deadline: Duration,
    capture: Capture,
    marker: Option<&Path>,
) -> io::Result<Ran> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 1)
        .map(Pid::from_raw);
    let stdout = Arc::new(Mutex::new(Sink::default()));
    let stderr = Arc::new(Mutex::new(Sink::default()));
    let readers = [
        child
            .stdout
            .take()
            .map(|s| tokio::spawn(drain(s, Arc::clone(&stdout), capture.stdout))),
        child
            .stderr
            .take()
            .map(|s| tokio::spawn(drain(s, Arc::clone(&stderr), capture.stderr))),
    ];

    // Wait for the leader to exit without reaping it: while it is a zombie
    // its pid is still the group's id and cannot be reused.
    let exited = match pid {
        Some(pid) => tokio::time::timeout(deadline, exited_unreaped(pid))
            .await
            .map(|r| r.is_ok()),
        // No pid: the child was already reaped; nothing to wait for here.
        None => Ok(true),
    };
    let timed_out = exited.is_err();
    // Only while the leader is known to be unreaped: after a failed waitid
    // nothing says the id still names our group.
    if timed_out || (capture.kill_group_after_exit && exited == Ok(true)) {
        if let Some(pid) = pid {
            // ESRCH (the group is already empty) is fine.
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
    let status = if timed_out {
        tokio::time::timeout(REAP_GRACE, child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    } else {
        match child.wait().await {
            Ok(s) => Some(s),
            Err(e) => {
                for r in readers.into_iter().flatten() {
                    r.abort();
                }
                return Err(e);
            }
        }
    };
    // Also after a normal exit: anything still naming the marker is a stray
    // that would outlive the directory it names.
    if let Some(m) = marker {
        kill_marked(m);
    }
    let elapsed = started.elapsed();
    for mut r in readers.into_iter().flatten() {
        if tokio::time::timeout(PIPE_GRACE, &mut r).await.is_err() {
            // A descendant still holds the pipe; what was read so far is kept.
            r.abort();
        }
    }
    let out = take(&stdout);
    Ok(Ran {
        status,
        timed_out,
        stdout: out.buf,
        stdout_overflowed: out.overflowed,
        stderr: take(&stderr).buf,
        elapsed,
    })
}

/// Resolves when `pid` (our child) has exited, leaving it unreaped.
async fn exited_unreaped(pid: Pid) -> Result<(), nix::Error> {
    let waited = tokio::task::spawn_blocking(move || loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(nix::Error::EINTR) => continue,
            other => return other.map(drop),
        }
    })
    .await;
    waited.unwrap_or(Err(nix::Error::ECHILD))
}

#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    overflowed: bool,
}

fn take(s: &Mutex<Sink>) -> Sink {
    std::mem::take(&mut *s.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Reads a pipe to its end, keeping what `keep` says; it keeps reading past
/// the bound so the child never blocks on a full pipe.
async fn drain(mut src: impl AsyncRead + Unpin, sink: Arc<Mutex<Sink>>, keep: Keep) {
    let mut chunk = [0u8; 8192];
    let bound = keep.bound();
    loop {
        let n = match src.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
        match keep {
            Keep::Head(_) => {
                let room = bound.saturating_sub(s.buf.len());
                if n > room {
                    s.overflowed = true;
                }
                s.buf.extend_from_slice(&chunk[..n.min(room)]);
            }
            Keep::Tail(_) => {
                s.buf.extend_from_slice(&chunk[..n]);
                if s.buf.len() > bound {
                    s.overflowed = true;
                    let excess = s.buf.len() - bound;
                    s.buf.drain(..excess);
                }
            }
        }
    }
}

/// Kills every process whose command line contains `marker` (a path only
/// the caller created), returning how many were signalled. Reads this
/// process' own `/proc`: these are our descendants, not host state.
pub fn kill_marked(marker: &Path) -> usize {
    let needle = marker.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id();
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|p| *p != me && *p > 1)
            .and_then(|p| i32::try_from(p).ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            // The pid named the caller's private path a moment ago.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed += 1;
        }
    }
    killed
}

/// How a child ended, as a phrase: "exited with status 2".
pub fn describe_status(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended abnormally".to_string(),
    }
}

/// The last non-empty line of a child's output, cleaned for a report.
pub fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(crate::text::report_line)
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const CAP: Capture = Capture {
        stdout: Keep::Head(16),
        stderr: Keep::Tail(16),
        kill_group_after_exit: false,
    };

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[tokio::test]
    async fn captures_head_and_tail_within_bounds() {
        let ran = run(
            sh("printf '0123456789abcdefXYZ'; printf 'first\\nlast line\\n' >&2; exit 3"),
            Duration::from_secs(10),
            CAP,
            None,
        )
        .await
        .unwrap();
        assert_eq!(ran.stdout, b"0123456789abcdef");
        assert!(ran.stdout_overflowed && !ran.timed_out);
        assert_eq!(last_line(&ran.stderr), "last line");
        assert_eq!(describe_status(ran.status.unwrap()), "exited with status 3");
    }

    /// A pipe whose write end the children inherit: its read end sees EOF
    /// once every process holding the write end is gone.
    fn liveness_pipe() -> (std::fs::File, std::os::fd::OwnedFd) {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        let (r, w) = nix::unistd::pipe().unwrap();
        fcntl(&r, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).unwrap();
        (std::fs::File::from(r), w)
    }

    /// Waits (up to 10 s) for every holder of the pipe's write end to die.
    fn all_gone(mut r: std::fs::File) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = std::io::Read::read_to_end(&mut r, &mut buf);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10)).is_ok()
    }

    /// A group member that outlives the timeout is killed with the leader.
    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (r, w) = liveness_pipe();
        let ran = run(sh("sleep 30 & wait"), Duration::from_millis(300), CAP, None)
            .await
            .unwrap();
        drop(w);
        assert!(ran.timed_out);
        assert!(all_gone(r), "the backgrounded sleep survived the timeout");
    }

    #[tokio::test]
    async fn kill_group_after_exit_ends_what_the_shell_left_behind() {
        let capture = Capture {
            kill_group_after_exit: true,
            ..CAP
        };
        let (r, w) = liveness_pipe();
        let ran = run(
            sh("sleep 30 >/dev/null 2>&1 &"),
            Duration::from_secs(10),
            capture,
            None,
        )
        .await
        .unwrap();
        drop(w);
        assert!(!ran.timed_out && ran.status.is_some_and(|s| s.success()));
        assert!(all_gone(r), "the backgrounded sleep survived its shell");
    }

    #[test]
    fn lines_are_cleaned_and_capped() {
        assert_eq!(crate::text::report_line("a\u{1b}b"), "a?b");
        let long = "x".repeat(1000);
        assert_eq!(
            crate::text::report_line(&long).chars().count(),
            crate::text::REPORT_LINE_CHARS + 1
        );
        assert_eq!(last_line(b"a\nb\n\n  \n"), "b");
        assert_eq!(last_line(b""), "");
    }
}
