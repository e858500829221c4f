//! `sandbox-readiness`: probe | serve | check | tls init. Parses flags and
//! dispatches; everything else lives in the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};
use sandbox_readiness::{
    agent::{self, ServeArgs},
    cli::{DesiredArgs, Format, HostArgs, LogFormat},
    evaluate, fleet,
    observe::{self, userns, Scope},
    output,
    report::Generations,
    tls,
};

#[derive(Debug, Parser)]
#[command(
    name = "sandbox-readiness",
    version,
    about = "Is this Talos worker really ready for sandboxed (gVisor) workloads?"
)]
struct Cli {
    /// Log format (logs go to stderr).
    #[arg(
        long,
        global = true,
        default_value = "text",
        env = "SANDBOX_READINESS_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Observe this machine once and print the report (and the verdict, with desired-state flags).
    Probe(Box<ProbeArgs>),
    /// Run the agent: keep a fresh observation and serve it over gRPC.
    Serve(Box<ServeArgs>),
    /// Ask many agents whether they converged to a desired state.
    Check(Box<fleet::CheckArgs>),
    /// Certificates for the agent's mTLS.
    #[command(subcommand)]
    Tls(TlsCommand),
}

#[derive(Debug, Args)]
struct ProbeArgs {
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

#[derive(Debug, Subcommand)]
enum TlsCommand {
    /// Create a CA, a server certificate and a controller (client) certificate in DIR.
    Init {
        dir: PathBuf,
        /// A name or IP address the server certificate is valid for (repeatable; wildcards allowed).
        #[arg(long = "san", required = true)]
        sans: Vec<String>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
}

fn main() -> ExitCode {
    // The probe helper must run before any thread exists (unshare(2)).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == userns::HELPER_ARG)
    {
        return ExitCode::from(u8::try_from(userns::helper_main()).unwrap_or(1));
    }
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve(_) => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    init_logs(cli.log_format, default_level);
    match cli.command {
        Command::Probe(args) => runtime(|| probe(*args)),
        Command::Serve(args) => runtime(|| async move {
            match agent::run(*args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sandbox-readiness serve: {e}");
                    ExitCode::from(2)
                }
            }
        }),
        Command::Check(args) => runtime(|| fleet::run(*args)),
        Command::Tls(TlsCommand::Init { dir, sans, force }) => {
            let opts = tls::InitOptions {
                force,
                ..tls::InitOptions::default()
            };
            match tls::init(&dir, &sans, &opts) {
                Ok(out) => {
                    print!("{}", tls::render_instructions(&out));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sandbox-readiness tls init: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn init_logs(format: LogFormat, level: tracing::Level) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        // Colour only for a terminal: `talosctl logs` shows raw bytes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// One runtime thread: the agent is I/O-bound and small; a second core
/// would buy little and cost memory on every node.
fn runtime<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ExitCode>,
{
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(f()),
        Err(e) => {
            eprintln!("sandbox-readiness: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

async fn probe(args: ProbeArgs) -> ExitCode {
    let desired = match args.desired.to_desired() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sandbox-readiness probe: {e}");
            return ExitCode::from(2);
        }
    };
    let extra = desired.sysctls.iter().map(|s| s.name.clone()).collect();
    let cfg = args.host.to_config(extra);
    let scope = Scope {
        sandbox: args.sandbox_probe || desired.require_sandbox_probe,
    };
    let mut report = observe::observe(&cfg, scope).await;
    Generations::default().stamp(&mut report);
    let verdict = (!evaluate::is_empty(&desired)).then(|| evaluate::evaluate(&report, &desired));
    match args.output {
        Format::Table => {
            print!("{}", output::report_table(&report));
            if let Some(v) = &verdict {
                print!("{}", output::verdict_table(v));
            }
        }
        Format::Json => {
            let doc = serde_json::json!({ "report": report, "verdict": verdict });
            match serde_json::to_string_pretty(&doc) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("sandbox-readiness probe: cannot encode JSON: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    }
    match verdict {
        Some(v) if !v.converged => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}
