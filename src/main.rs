//! `sandbox-readiness`: probe | serve | check | tls init. The binary is the
//! CLI layer ([`cli`]): flags, dispatch and exit codes; everything else
//! lives in the library.

mod cli;

use std::process::ExitCode;

use sandbox_readiness::{
    init::{self, Role},
    observe::userns,
};

fn main() -> ExitCode {
    let first = std::env::args_os().nth(1);
    // As PID 1 (a Talos extension service), fork before any thread exists:
    // the parent reaps orphans and forwards signals, the child is the agent.
    match init::supervise_if_pid1(first.as_deref(), userns::HELPER_ARG) {
        Ok(Role::Exit(code)) => return cli::exit::supervisor_status(code),
        Ok(Role::Agent) => {}
        Err(e) => eprintln!("sandbox-readiness: {e}; orphaned processes will not be reaped"),
    }
    // The probe helper must run before any thread exists (unshare(2)).
    if first.is_some_and(|a| a == userns::HELPER_ARG) {
        return cli::exit::helper_status(userns::helper_main());
    }
    cli::main()
}
