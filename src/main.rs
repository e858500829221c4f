use std::process::ExitCode;

fn main() -> ExitCode {
    // The probe helper must run before any thread exists (unshare(2)).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == sandbox_readiness::observe::userns::HELPER_ARG)
    {
        return ExitCode::from(
            u8::try_from(sandbox_readiness::observe::userns::helper_main()).unwrap_or(1),
        );
    }
    ExitCode::SUCCESS
}
