//! PID 1 duty, the way tini and catatonit do it.
//!
//! On a Talos node the agent is PID 1 of its own PID namespace, so every
//! process orphaned inside it (a timed-out runsc's sandbox and gofer, a
//! parked child of a killed probe helper) is reparented to it, and stays a
//! zombie unless PID 1 reaps it. A `waitpid(-1)` loop inside the agent would
//! steal the exit statuses tokio waits for on its own children, so instead,
//! when the process starts as PID 1, it forks first thing (before any thread
//! exists): the parent only forwards signals to the child, reaps every
//! process, and exits with the child's status; the child is the agent.
//!
//! The decisions are pure ([`should_supervise`], [`on_signal`],
//! [`exit_code`]); [`supervise_if_pid1`] does the syscalls.

use std::ffi::OsStr;

use nix::{
    errno::Errno,
    sys::{
        signal::{kill, SigSet, SigmaskHow, Signal},
        wait::{waitpid, WaitPidFlag, WaitStatus},
    },
    unistd::{fork, getpid, ForkResult, Pid},
};

/// The signals the parent passes on to the agent (tini's and catatonit's
/// set, minus job control, which a service has no use for).
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Whether a process with `pid`, started with `first_arg`, must fork and
/// supervise: it is PID 1, and it is not the probe helper (which never runs
/// as PID 1 on its own, and must stay single-process). Pure.
pub fn should_supervise(pid: i32, first_arg: Option<&OsStr>, helper_arg: &str) -> bool {
    pid == 1 && first_arg.is_none_or(|a| a != helper_arg)
}

/// What the supervising parent does with a signal it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Reap every exited child (SIGCHLD).
    Reap,
    /// Pass the signal on to the agent.
    Forward(Signal),
    /// Nothing (a signal it does not wait for).
    Ignore,
}

/// What to do on `sig`. Pure.
pub fn on_signal(sig: Signal) -> Action {
    if sig == Signal::SIGCHLD {
        Action::Reap
    } else if FORWARDED.contains(&sig) {
        Action::Forward(sig)
    } else {
        Action::Ignore
    }
}

/// The exit code that reports a child's end the way a shell does: its own
/// code, or 128 + the signal that killed it. `None` for a status that is
/// not an end (stopped, continued). Pure.
pub fn exit_code(status: WaitStatus) -> Option<u8> {
    match status {
        WaitStatus::Exited(_, code) => Some(u8::try_from(code & 0xff).unwrap_or(1)),
        WaitStatus::Signaled(_, sig, _) => Some(128u8.saturating_add(sig as u8)),
        _ => None,
    }
}

/// Errors of the supervisor's setup (after which the process carries on as
/// the agent itself, unsupervised).
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("cannot block signals before forking: {0}")]
    Mask(Errno),
    #[error("cannot fork the agent off PID 1: {0}")]
    Fork(Errno),
}

/// Where the caller goes on.
#[derive(Debug)]
pub enum Role {
    /// This process is the agent: run it.
    Agent,
    /// This process was PID 1's supervisor and the agent ended: exit with
    /// this code.
    Exit(u8),
}

/// When this process is PID 1 (and `first_arg` is not `helper_arg`), forks:
/// the child returns [`Role::Agent`] with the signal mask it started with;
/// the parent forwards signals, reaps every process, and returns
/// [`Role::Exit`] once the agent has ended. Otherwise returns
/// [`Role::Agent`] at once.
///
/// Must be called before any thread exists. A setup error is returned with
/// the process still the agent (unsupervised, as before this existed).
pub fn supervise_if_pid1(first_arg: Option<&OsStr>, helper_arg: &str) -> Result<Role, InitError> {
    if !should_supervise(getpid().as_raw(), first_arg, helper_arg) {
        return Ok(Role::Agent);
    }
    // Block everything before forking, so no signal meant for the agent
    // arrives between fork and the wait loop (and so PID 1, which the kernel
    // shields from signals it has no handler for, still receives the blocked
    // ones: a blocked signal is never discarded as ignored).
    let mut old = SigSet::empty();
    nix::sys::signal::sigprocmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )
    .map_err(InitError::Mask)?;
    // SAFETY: called first thing in main, before any thread exists, so the
    // child may run any code, not only async-signal-safe calls.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            // The agent starts with the mask the process had.
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            Ok(Role::Agent)
        }
        Ok(ForkResult::Parent { child }) => Ok(Role::Exit(supervise(child))),
        Err(e) => {
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            Err(InitError::Fork(e))
        }
    }
}

/// The parent's loop: every signal is blocked and taken with sigwait(2).
fn supervise(agent: Pid) -> u8 {
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    for s in FORWARDED {
        waited.add(s);
    }
    loop {
        let Ok(sig) = waited.wait() else { continue };
        match on_signal(sig) {
            Action::Forward(s) => {
                let _ = kill(agent, s);
            }
            Action::Ignore => {}
            Action::Reap => {
                if let Some(code) = reap_all(agent) {
                    return code;
                }
            }
        }
    }
}

/// Reaps every child that has ended; the agent's exit code once it is one
/// of them.
fn reap_all(agent: Pid) -> Option<u8> {
    let mut agent_code = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return agent_code,
            Ok(status) => {
                if status.pid() == Some(agent) {
                    agent_code = exit_code(status).or(agent_code);
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => return agent_code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELPER: &str = "__probe-userns";

    #[test]
    fn only_pid_1_supervises_and_never_the_helper() {
        assert!(should_supervise(1, None, HELPER));
        assert!(should_supervise(1, Some(OsStr::new("serve")), HELPER));
        assert!(!should_supervise(1, Some(OsStr::new(HELPER)), HELPER));
        assert!(!should_supervise(2, Some(OsStr::new("serve")), HELPER));
        assert!(!should_supervise(4242, None, HELPER));
    }

    #[test]
    fn signals_are_forwarded_or_reaped() {
        assert_eq!(on_signal(Signal::SIGCHLD), Action::Reap);
        for s in FORWARDED {
            assert_eq!(on_signal(s), Action::Forward(s));
        }
        assert_eq!(on_signal(Signal::SIGPIPE), Action::Ignore);
        assert_eq!(on_signal(Signal::SIGWINCH), Action::Ignore);
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        let pid = Pid::from_raw(7);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 0)), Some(0));
        assert_eq!(exit_code(WaitStatus::Exited(pid, 3)), Some(3));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGTERM, true)),
            Some(143)
        );
        assert_eq!(exit_code(WaitStatus::Stopped(pid, Signal::SIGSTOP)), None);
        assert_eq!(exit_code(WaitStatus::StillAlive), None);
    }
}
