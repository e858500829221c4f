//! `probe`: flags, then the library's [`probe::probe`] printed as asked.

use clap::Args;
use sandbox_readiness::probe;

use super::{
    args::{DesiredArgs, Format, HostArgs},
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
    #[command(flatten)]
    host: HostArgs,
    #[command(flatten)]
    desired: DesiredArgs,
}

/// 0 unless a desired state was given and did not converge (1); 2 for a
/// desired state that does not validate.
pub async fn run(args: ProbeArgs) -> Outcome {
    let desired = match args.desired.to_desired() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(WHO, e),
    };
    let probed = probe::probe(&args.host.to_config(), &desired, args.sandbox_probe).await;
    match args.output {
        Format::Table => print!("{}", probed.table()),
        Format::Json => match probed.json() {
            Ok(s) => println!("{s}"),
            Err(e) => return Outcome::failed(WHO, format_args!("cannot encode JSON: {e}")),
        },
    }
    Outcome::converged(probed.converged())
}
