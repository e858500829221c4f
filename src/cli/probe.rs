//! `probe`: flags, then the library's [`probe::probe`] printed as asked.

use std::time::Duration;

use clap::Args;
use sandbox_readiness::{probe, text::fmt_duration};

use super::{
    args::{parse_positive_duration, DesiredArgs, Format, HostArgs},
    exit::Outcome,
};

const WHO: &str = "sandbox-readiness probe";

/// Flags of `probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table")]
    output: Format,
    /// Also run the sandbox smoke probe (runsc do true).
    #[arg(long)]
    sandbox_probe: bool,
    /// The whole probe's deadline, over every step's own (--cri-timeout,
    /// --exec-timeout, --sandbox-timeout, --canary-timeout): past it, one
    /// line and exit 2, so a script never waits on a host that hangs.
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    timeout: Duration,
    #[command(flatten)]
    host: HostArgs,
    #[command(flatten)]
    desired: DesiredArgs,
}

/// 0 unless a desired state was given and did not converge (1); 2 for a
/// desired state that does not validate, or a probe past `--timeout`.
pub async fn run(args: ProbeArgs) -> Outcome {
    let desired = match args.desired.to_desired() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(WHO, e),
    };
    let cfg = args.host.to_config();
    let probing = probe::probe(&cfg, &desired, args.sandbox_probe);
    // Host reads run on blocking threads the runtime abandons at exit, and
    // every child runs under its own deadline, so giving up here leaks
    // nothing that outlives the process.
    let Ok(probed) = tokio::time::timeout(args.timeout, probing).await else {
        return Outcome::failed(
            WHO,
            format_args!(
                "did not finish within {} (--timeout): a host read, the CRI or a child hung",
                fmt_duration(args.timeout)
            ),
        );
    };
    match args.output {
        Format::Table => print!("{}", probed.table()),
        Format::Json => match probed.json() {
            Ok(s) => println!("{s}"),
            Err(e) => return Outcome::failed(WHO, format_args!("cannot encode JSON: {e}")),
        },
    }
    Outcome::converged(probed.converged())
}
