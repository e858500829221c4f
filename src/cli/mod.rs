//! The binary's CLI layer: clap types, the conversion of flags into the
//! library's configuration, dispatch, and (in [`exit`]) every exit code.
//!
//! Every `serve` flag also reads `SANDBOX_READINESS_<FLAG>` from the
//! environment, because Talos passes an extension service its configuration
//! as environment (ExtensionServiceConfig `environment`); repeatable flags
//! take a comma-separated list there. `probe`, `check` and `tls init` read
//! only their flags ([`command`] strips the variables the shared flag groups
//! declare), so a variable exported for an agent never changes what an
//! operator's command checks. `--log-format` reads
//! `SANDBOX_READINESS_LOG_FORMAT` everywhere: it changes no result.
//!
//! `check` and `tls init` are operator commands, run from a workstation:
//! they exist only with the crate's `operator` feature (on by default). The
//! node build (the extension's, `--no-default-features`) leaves them out —
//! a Talos node has no shell to run them from — and answers their names
//! with one line saying so ([`Omitted`]).

mod args;
#[cfg(feature = "operator")]
mod check;
#[cfg(feature = "operator")]
mod check_nodes;
pub mod exit;
mod probe;
mod serve;

#[cfg(feature = "operator")]
use std::path::{Path, PathBuf};
use std::{future::Future, process::ExitCode};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
#[cfg(feature = "operator")]
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
    /// Ask many agents whether they converged to a desired state (operator build only: not in the node build the extension carries).
    #[cfg(feature = "operator")]
    Check(Box<check::CheckArgs>),
    /// Certificates for the agent's mTLS (operator build only: not in the node build the extension carries).
    #[cfg(feature = "operator")]
    #[command(subcommand)]
    Tls(TlsCommand),
    // The node build's `check` and `tls`: hidden; they only say where the
    // command is (`help check` shows the same sentence as its about).
    #[cfg(not(feature = "operator"))]
    #[command(hide = true, disable_help_flag = true, about = OMITTED_ABOUT)]
    Check(Omitted),
    #[cfg(not(feature = "operator"))]
    #[command(hide = true, disable_help_flag = true, about = OMITTED_ABOUT)]
    Tls(Omitted),
}

/// An operator command's name in the node build. Whatever follows it
/// (`--help` included) is taken and ignored, so `check -n node-1` or
/// `tls init --help` get the one line that says why the command is missing,
/// not clap's generic "unrecognized subcommand" or a flag error.
#[cfg(not(feature = "operator"))]
#[derive(Debug, clap::Args)]
struct Omitted {
    #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<std::ffi::OsString>,
}

#[cfg(not(feature = "operator"))]
const OMITTED_ABOUT: &str = "Not in this node build (serve and probe only): an operator command; run it from an operator build of the same crate (`cargo build --release`, default features)";

/// The line the node build answers an operator command with (exit 2).
#[cfg(not(feature = "operator"))]
fn omitted(command: &str) -> exit::Outcome {
    Outcome::failed(
        "sandbox-readiness",
        format_args!(
            "`{command}` is an operator command, which this node build (serve and probe only) leaves out: run it from an operator build of the same crate (`cargo build --release`, default features)"
        ),
    )
}

#[cfg(feature = "operator")]
#[derive(Debug, Subcommand)]
enum TlsCommand {
    /// Create a CA, server certificates and a client certificate for check in DIR: one server certificate per node (--node, --nodes-file) or one shared by every node (--san).
    Init {
        /// The directory to write into (created 0700 if missing).
        dir: PathBuf,
        /// One server certificate per node, valid for NAME and the SANs; its ExtensionServiceConfig goes to DIR/nodes/NAME.yaml (repeatable).
        #[arg(long = "node", value_name = "NAME[=SAN,...]", value_parser = parse_node)]
        nodes: Vec<tls::NodeSpec>,
        /// A file of --node values, one per line; '#' starts a comment.
        #[arg(long, value_name = "FILE")]
        nodes_file: Option<PathBuf>,
        /// One server certificate shared by every node, valid for this name or IP address (repeatable; wildcards allowed); its ExtensionServiceConfig goes to DIR/server.yaml.
        #[arg(long = "san", value_name = "NAME", conflicts_with_all = ["nodes", "nodes_file"])]
        sans: Vec<String>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
}

/// Parses the flags (clap exits 2 on bad usage), runs the command and
/// turns its outcome into the exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let default_level = match cli.command {
        Command::Serve(_) => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    init_logs(cli.log_format, default_level);
    match cli.command {
        Command::Probe(a) => runtime(|| probe::run(*a)),
        Command::Serve(a) => runtime(|| serve::run(*a)),
        #[cfg(feature = "operator")]
        Command::Check(a) => runtime(|| check::run(*a)),
        #[cfg(feature = "operator")]
        Command::Tls(TlsCommand::Init {
            dir,
            nodes,
            nodes_file,
            sans,
            force,
        }) => tls_init(&dir, nodes, nodes_file.as_deref(), &sans, force).finish(),
        #[cfg(not(feature = "operator"))]
        Command::Check(_) => omitted("check").finish(),
        #[cfg(not(feature = "operator"))]
        Command::Tls(_) => omitted("tls init").finish(),
    }
}

/// The command line as parsed: the derived one, with the environment
/// variables of every subcommand but `serve` removed (the flag groups
/// `probe` and `check` share with `serve` declare them). The CLI reference
/// (docs/reference/cli.md) is rendered from this too.
fn command() -> clap::Command {
    let no_env = |sub: clap::Command| sub.mut_args(|a| a.env(None::<&'static str>));
    let cmd = Cli::command().mut_subcommand("probe", no_env);
    #[cfg(feature = "operator")]
    let cmd = cmd.mut_subcommand("check", no_env);
    cmd
}

#[cfg(feature = "operator")]
fn parse_node(s: &str) -> Result<tls::NodeSpec, tls::TlsError> {
    s.parse()
}

/// Writes the material; stdout lists the files, never their contents
/// (they hold private keys).
#[cfg(feature = "operator")]
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
        let why = if nodes_file.is_some() {
            "the --nodes-file lists no nodes"
        } else {
            "which names the agents' server certificates are for is missing"
        };
        return Outcome::failed(
            WHO,
            format_args!(
                "{why}: give --node NAME[=SAN,...] (one certificate per node, repeatable), --nodes-file FILE, or --san NAME (one certificate shared by every node); e.g. tls init {} --node worker-1=10.0.0.21",
                dir.display()
            ),
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

#[cfg(test)]
mod tests {
    #[cfg(feature = "operator")]
    use std::path::Path;

    use clap::Parser;
    #[cfg(feature = "operator")]
    use sandbox_readiness::clidoc;

    /// docs/reference/cli.md is this command tree, rendered
    /// (`SR_REGENERATE_DOCS=1` rewrites it): the full build's, every command.
    #[cfg(feature = "operator")]
    #[test]
    fn the_cli_reference_is_generated_from_these_definitions() {
        let md = clidoc::markdown(
            super::command(),
            "Command-line reference: sandbox-readiness",
            "<!-- Generated from src/cli/ by `cargo test --bin sandbox-readiness`; do not edit. SR_REGENERATE_DOCS=1 rewrites it. -->\n\n\
             One binary, two builds of it: the operator build (`cargo build --release`, default features) has \
             `probe`, `serve`, `check` and `tls init`; the node build the Talos extension carries \
             (`--no-default-features`: no `operator` feature) has `probe` and `serve` only, and answers \
             `check` and `tls init` with one line saying so (exit 2). Exit codes everywhere: 0 converged or success, \
             1 not converged or a node could not be asked, 2 bad usage or configuration (one line on stderr).\n\n\
             Environment variables are read by `serve` only (and `SANDBOX_READINESS_LOG_FORMAT` by every command); \
             a repeatable flag takes a comma-separated list there, a switch `true` or `false`. \
             On Talos they come from the ExtensionServiceConfig's `environment` (docs/deployment/configuration.md). \
             The controller's flags: [controller-cli.md](controller-cli.md).",
        );
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/cli.md");
        if let Err(e) = clidoc::check_or_write(&path, &md) {
            panic!("{e}");
        }
    }

    /// `probe` and `check` read no `SANDBOX_READINESS_*` variable: one
    /// exported for an agent must not change an operator's command.
    #[test]
    fn only_serve_reads_the_environment() {
        let mut cmd = super::command();
        cmd.build();
        for sub in cmd.get_subcommands() {
            let with_env: Vec<String> = sub
                .get_arguments()
                .filter(|a| !a.is_global_set() && a.get_env().is_some())
                .map(|a| a.get_id().to_string())
                .collect();
            match sub.get_name() {
                "serve" => assert!(with_env.len() > 20, "serve reads {with_env:?}"),
                other => assert!(with_env.is_empty(), "{other} reads {with_env:?}"),
            }
        }
    }

    /// `tls init DIR` alone says what it needs (exit 2), not a clap error
    /// about one of three alternatives.
    #[cfg(feature = "operator")]
    #[test]
    fn tls_init_without_names_says_what_it_needs() {
        let dir = std::env::temp_dir().join(format!("sr-tls-init-{}", std::process::id()));
        let out = super::tls_init(&dir, Vec::new(), None, &[], false);
        match out {
            super::Outcome::Failed { reason, .. } => {
                assert!(reason.contains("--node NAME[=SAN,...]"), "{reason}");
                assert!(reason.contains("--san NAME"), "{reason}");
                assert!(reason.contains("--nodes-file FILE"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!dir.exists());
        super::Cli::try_parse_from(["sandbox-readiness", "tls", "init", "pki"])
            .map(|_| ())
            .unwrap_or_else(|e| panic!("tls init DIR must parse and fail in tls_init: {e}"));
    }

    /// The node build takes `check` and `tls` with anything after them
    /// (their flags, `--help`) and answers with one line, exit 2; its help
    /// lists neither.
    #[cfg(not(feature = "operator"))]
    #[test]
    fn the_node_build_says_where_the_operator_commands_are() {
        for args in [
            &["sandbox-readiness", "check", "-n", "node-1", "--wait", "5m"][..],
            &["sandbox-readiness", "check", "--help"][..],
            &[
                "sandbox-readiness",
                "--log-format",
                "json",
                "tls",
                "init",
                "pki",
                "--san",
                "x",
            ][..],
        ] {
            let cli = super::Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let (out, name) = match cli.command {
                super::Command::Check(_) => (super::omitted("check"), "`check`"),
                super::Command::Tls(_) => (super::omitted("tls init"), "`tls init`"),
                other => panic!("{args:?}: {other:?}"),
            };
            match out {
                super::Outcome::Failed { reason, .. } => {
                    assert!(reason.starts_with(name), "{reason}");
                    assert!(
                        reason.contains("operator build of the same crate"),
                        "{reason}"
                    );
                    assert!(!reason.contains('\n'), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        let help = super::command().render_help().to_string();
        assert!(help.contains("probe") && help.contains("serve"), "{help}");
        assert!(!help.contains("check") && !help.contains("tls"), "{help}");
        // Something else unknown is still clap's usage error.
        assert!(super::Cli::try_parse_from(["sandbox-readiness", "chek"]).is_err());
    }
}
