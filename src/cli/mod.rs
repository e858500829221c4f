//! The binary's CLI layer: clap types, the conversion of flags into the
//! library's configuration, dispatch, and (in [`exit`]) every exit code.
//!
//! Every flag also reads `SANDBOX_READINESS_<FLAG>` from the environment
//! (except `check`'s), because Talos passes an extension service its
//! configuration as environment (ExtensionServiceConfig `environment`).
//! Repeatable flags take a comma-separated list there.

mod args;
mod check;
mod check_nodes;
pub mod exit;
mod probe;
mod serve;

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{Parser, Subcommand};
use sandbox_readiness::{hostio, tls};

use args::LogFormat;
use exit::Outcome;

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
    Probe(Box<probe::ProbeArgs>),
    /// Run the agent: keep a fresh observation and serve it over gRPC.
    Serve(Box<serve::ServeArgs>),
    /// Ask many agents whether they converged to a desired state.
    Check(Box<check::CheckArgs>),
    /// Certificates for the agent's mTLS.
    #[command(subcommand)]
    Tls(TlsCommand),
}

#[derive(Debug, Subcommand)]
enum TlsCommand {
    /// Create a CA, server certificates and a controller (client) certificate in DIR.
    Init {
        dir: PathBuf,
        /// One server certificate per node, valid for NAME and the SANs; its ExtensionServiceConfig goes to DIR/nodes/NAME.yaml (repeatable).
        #[arg(long = "node", value_name = "NAME[=SAN,...]", value_parser = parse_node)]
        nodes: Vec<tls::NodeSpec>,
        /// A file of --node values, one per line; '#' starts a comment.
        #[arg(long, value_name = "FILE")]
        nodes_file: Option<PathBuf>,
        /// One server certificate shared by every node, valid for this name or IP address (repeatable; wildcards allowed); its ExtensionServiceConfig goes to DIR/server.yaml.
        #[arg(
            long = "san",
            conflicts_with_all = ["nodes", "nodes_file"],
            required_unless_present_any = ["nodes", "nodes_file"]
        )]
        sans: Vec<String>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
}

/// Parses the flags (clap exits 2 on bad usage), runs the command and
/// turns its outcome into the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve(_) => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    init_logs(cli.log_format, default_level);
    match cli.command {
        Command::Probe(a) => runtime(|| probe::run(*a)),
        Command::Serve(a) => runtime(|| serve::run(*a)),
        Command::Check(a) => runtime(|| check::run(*a)),
        Command::Tls(TlsCommand::Init {
            dir,
            nodes,
            nodes_file,
            sans,
            force,
        }) => tls_init(&dir, nodes, nodes_file.as_deref(), &sans, force).finish(),
    }
}

fn parse_node(s: &str) -> Result<tls::NodeSpec, tls::TlsError> {
    s.parse()
}

/// Writes the material; stdout lists the files, never their contents
/// (they hold private keys).
fn tls_init(
    dir: &Path,
    mut nodes: Vec<tls::NodeSpec>,
    nodes_file: Option<&Path>,
    sans: &[String],
    force: bool,
) -> Outcome {
    const WHO: &str = "sandbox-readiness tls init";
    let opts = tls::InitOptions {
        force,
        ..tls::InitOptions::default()
    };
    if let Some(file) = nodes_file {
        let listed = hostio::read_operator_file(file, 1 << 20)
            .map_err(|e| format!("--nodes-file {}: {}", file.display(), e.reason()))
            .and_then(|text| tls::parse_nodes_file(&text).map_err(|e| e.to_string()));
        match listed {
            Ok(listed) => nodes.extend(listed),
            Err(e) => return Outcome::failed(WHO, e),
        }
    }
    if sans.is_empty() && nodes.is_empty() {
        return Outcome::failed(
            WHO,
            "no nodes: give --node NAME[=SAN,...] or a --nodes-file that lists some",
        );
    }
    let printed = if sans.is_empty() {
        tls::init_nodes(dir, &nodes, &opts).map(|out| tls::render_nodes_summary(&out))
    } else {
        tls::init(dir, sans, &opts).map(|out| tls::render_summary(&out))
    };
    match printed {
        Ok(text) => {
            print!("{text}");
            Outcome::Success
        }
        Err(e) => Outcome::failed(WHO, e),
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
/// would buy little and cost memory on every node. The outcome is settled
/// while the runtime still exists (see [`Outcome::SuccessAbandoning`]).
fn runtime<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Outcome>,
{
    // Host reads run on the blocking pool (off the one runtime thread): a
    // bounded pool, so reads stuck on a hung mount cannot pile up threads
    // without end, and idle threads gone after a second.
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(16)
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .build()
    {
        Ok(rt) => {
            let code = rt.block_on(f()).finish();
            // A host read stuck on the blocking pool (a hung mount) must not
            // keep the process from exiting: dropping the runtime would wait.
            rt.shutdown_background();
            code
        }
        Err(e) => Outcome::failed(
            "sandbox-readiness",
            format_args!("cannot start the async runtime: {e}"),
        )
        .finish(),
    }
}
