//! `sandbox-readiness`: probe | serve | check | tls init. The binary is the
//! CLI layer ([`cli`]): flags, dispatch and exit codes; everything else
//! lives in the library.

mod cli;

use std::process::ExitCode;

use sandbox_readiness::observe::userns;

fn main() -> ExitCode {
    // The probe helper must run before any thread exists (unshare(2)).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == userns::HELPER_ARG)
    {
        return cli::exit::helper_status(userns::helper_main());
    }
    cli::main()
}
