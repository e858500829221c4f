//! The one place exit codes are decided.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done: converged, or nothing was asked to converge |
//! | 1 | not converged, or a node could not be asked |
//! | 2 | bad usage or configuration (one line on stderr), or the command could not run |

use std::{fmt::Display, process::ExitCode};

use sandbox_readiness::text::clean_line;

const SUCCESS: u8 = 0;
const NOT_CONVERGED: u8 = 1;
const FAILED: u8 = 2;

/// How a command ended.
#[derive(Debug)]
pub enum Outcome {
    Success,
    /// Done, but work the runtime would wait for is still running (calls
    /// in flight after the shutdown grace): exit without dropping it.
    SuccessAbandoning,
    NotConverged,
    /// Bad usage or configuration, or the command could not run: one line
    /// `<who>: <reason>` on stderr.
    Failed {
        who: &'static str,
        reason: String,
    },
}

impl Outcome {
    /// A failure, printed as `who: error`.
    pub fn failed(who: &'static str, error: impl Display) -> Self {
        Outcome::Failed {
            who,
            reason: error.to_string(),
        }
    }

    pub fn converged(yes: bool) -> Self {
        if yes {
            Outcome::Success
        } else {
            Outcome::NotConverged
        }
    }

    fn code(&self) -> u8 {
        match self {
            Outcome::Success | Outcome::SuccessAbandoning => SUCCESS,
            Outcome::NotConverged => NOT_CONVERGED,
            Outcome::Failed { .. } => FAILED,
        }
    }

    /// Prints a failure's line and returns the exit code. Whatever the
    /// runtime still holds is dropped after this; an outcome that must not
    /// wait for it exits the process here.
    pub fn finish(self) -> ExitCode {
        if let Outcome::Failed { who, reason } = &self {
            eprintln!("{who}: {}", clean_line(reason));
        }
        let code = self.code();
        if matches!(self, Outcome::SuccessAbandoning) {
            std::process::exit(i32::from(code));
        }
        ExitCode::from(code)
    }
}

/// The userns probe helper's own status, passed through (1, its
/// generic failure, if out of range).
pub fn helper_status(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}

/// PID 1's supervisor exits with the agent's status (already a shell-style
/// code: the agent's own, or 128 + the signal that killed it).
pub fn supervisor_status(code: u8) -> ExitCode {
    ExitCode::from(code)
}
