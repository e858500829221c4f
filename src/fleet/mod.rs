//! The controller's side (`check`): ask many agents at once and say, per
//! node and for the pool, whether the desired state is in effect.
//!
//! The parts are a library first, for a controller written in Rust:
//! - [`nodes`]: which nodes (pure parsing of lists, files, NodeList JSON);
//! - [`client`]: [`client::Client::check_nodes`] asks every node in
//!   parallel, each under its own connect timeout and deadline, and returns
//!   one [`client::NodeResult`] per node;
//! - [`wait`]: [`wait::PoolWatch`] keeps one `Watch` stream per node of a
//!   changing node set and reports [`wait::Change`]s;
//! - [`output`]: the table, summary line and JSON document.
//!
//! [`run`] is the `check` command on top of them.

pub mod client;
pub mod nodes;
pub mod output;
pub mod source;
pub mod wait;

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use clap::Args;
use tokio::{sync::mpsc, time::Instant};

use crate::{
    cli::{parse_duration, DesiredArgs, Format},
    proto::v1::DesiredState,
};
use client::{Client, ClientOptions, NodeResult, Transport};
use nodes::{Node, DEFAULT_PORT};
use output::Progress;
use wait::{PoolWatch, WatchOptions};

/// Flags of `check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Nodes to ask, comma-separated (repeatable): HOST, HOST:PORT, IPv4, [IPv6], [IPv6]:PORT.
    #[arg(short = 'n', long = "nodes", value_name = "NODES")]
    pub nodes: Vec<String>,
    /// A file of nodes, one per line; '#' starts a comment (repeatable).
    #[arg(long, value_name = "FILE")]
    pub nodes_file: Vec<PathBuf>,
    /// The JSON of `kubectl get nodes -o json` ('-' for stdin): each node's InternalIP, rows labelled by node name.
    #[arg(long, value_name = "FILE|-")]
    pub kube_nodes: Option<PathBuf>,
    /// A shell command printing nodes (NodeList JSON, or one per line); re-run every round of --wait to follow a rollout.
    #[arg(long, value_name = "CMD")]
    pub nodes_cmd: Option<String>,
    /// How often --nodes-cmd is re-run during --wait.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub nodes_cmd_interval: Duration,
    /// Deadline for one run of --nodes-cmd.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub nodes_cmd_timeout: Duration,
    /// The pool has not converged while fewer than N nodes exist.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub expect_nodes: Option<u32>,
    /// Port for nodes given without one.
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// At most this many nodes are connected to or asked at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub parallel: u32,
    /// Deadline per node (connecting included).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Deadline for resolving and connecting to one node.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Ask every agent for a fresh observation first.
    #[arg(long, conflicts_with = "wait")]
    pub refresh: bool,
    /// Keep watching until every node converged or DURATION passed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table")]
    pub output: Format,
    /// Also print every node's full report (table output).
    #[arg(long)]
    pub show_reports: bool,
    /// CA bundle the agents' certificates chain to (PEM); turns TLS on.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate for the agents' mTLS (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// Client key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
    /// Verify agents against this name instead of the address dialled.
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_server_name: Option<String>,
    /// Talk plaintext to non-loopback addresses (answers can be read and forged on the way).
    #[arg(long, conflicts_with = "tls_ca")]
    pub insecure_plaintext: bool,
    #[command(flatten)]
    pub desired: DesiredArgs,
}

/// What `run` needs after the flags were checked.
struct Plan {
    desired: DesiredState,
    client: Client,
    /// From -n, --nodes-file and --kube-nodes; fixed for the whole run.
    fixed: Vec<Node>,
    /// The first --nodes-cmd result.
    from_cmd: Vec<Node>,
    expected: Option<usize>,
}

/// `check`: 0 when every node converged, 1 when any did not or could not be
/// asked, 2 for bad usage (one line on stderr, before anything is sent).
///
/// Works on a current-thread or a multi-thread tokio runtime; a
/// multi-thread one spreads TLS handshakes and decoding over the cores.
pub async fn run(args: CheckArgs) -> ExitCode {
    let plan = match prepare(&args).await {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("sandbox-readiness check: {msg}");
            return ExitCode::from(2);
        }
    };
    match args.wait {
        None => run_once(&args, plan).await,
        Some(limit) => run_wait(&args, plan, limit).await,
    }
}

async fn prepare(args: &CheckArgs) -> Result<Plan, String> {
    let desired = args.desired.to_desired().map_err(|e| e.to_string())?;
    for (flag, d) in [
        ("--timeout", args.timeout),
        ("--connect-timeout", args.connect_timeout),
        ("--nodes-cmd-interval", args.nodes_cmd_interval),
        ("--nodes-cmd-timeout", args.nodes_cmd_timeout),
    ] {
        if d.is_zero() {
            return Err(format!("{flag} must be more than 0"));
        }
    }
    if args.wait.is_some_and(|w| w.is_zero()) {
        return Err("--wait must be more than 0".into());
    }
    let transport = match &args.tls_ca {
        Some(ca) => Transport::Tls {
            config: Box::new(
                crate::tls::client_tls_config(
                    ca,
                    args.tls_cert.as_deref(),
                    args.tls_key.as_deref(),
                    args.tls_server_name.as_deref(),
                )
                .map_err(|e| e.to_string())?,
            ),
            identity: args.tls_cert.is_some(),
        },
        None => Transport::Plaintext {
            allow_remote: args.insecure_plaintext,
        },
    };

    if args.nodes.is_empty()
        && args.nodes_file.is_empty()
        && args.kube_nodes.is_none()
        && args.nodes_cmd.is_none()
    {
        return Err("no nodes: give -n/--nodes, --nodes-file, --kube-nodes or --nodes-cmd".into());
    }
    let mut fixed = Vec::new();
    if let Some(path) = &args.kube_nodes {
        let text = source::read_capped(path, "--kube-nodes")?;
        let origin = format!("--kube-nodes {}", path.display());
        fixed.extend(nodes::parse_node_list(&text, args.port, &origin).map_err(|e| e.to_string())?);
    }
    for list in &args.nodes {
        fixed.extend(nodes::parse_list(list, args.port).map_err(|e| e.to_string())?);
    }
    for path in &args.nodes_file {
        let text = source::read_capped(path, "--nodes-file")?;
        let origin = path.display().to_string();
        fixed.extend(nodes::parse_lines(&text, args.port, &origin).map_err(|e| e.to_string())?);
    }
    let from_cmd = match &args.nodes_cmd {
        Some(cmd) => source::run_nodes_cmd(cmd, args.port, args.nodes_cmd_timeout).await?,
        None => Vec::new(),
    };
    let plaintext_local_only = matches!(
        transport,
        Transport::Plaintext {
            allow_remote: false
        }
    );
    if plaintext_local_only {
        if let Some(n) = fixed
            .iter()
            .chain(&from_cmd)
            .find(|n| n.address.as_ref().is_some_and(|a| !a.is_loopback()))
        {
            return Err(format!(
                "node {} ({}) is not a loopback address: plaintext goes to loopback only; give --tls-ca (with --tls-cert/--tls-key for mTLS), or --insecure-plaintext",
                n.name,
                n.address_display()
            ));
        }
    }
    let all = nodes::dedupe(fixed.iter().chain(&from_cmd).cloned().collect());
    if all.is_empty() && args.wait.is_none() {
        return Err("no nodes to ask: the node sources listed none".into());
    }
    let client = Client::new(ClientOptions {
        connect_timeout: args.connect_timeout,
        timeout: args.timeout,
        parallel: usize::try_from(args.parallel).unwrap_or(256),
        transport,
    });
    Ok(Plan {
        desired,
        client,
        fixed,
        from_cmd,
        expected: args.expect_nodes.and_then(|n| usize::try_from(n).ok()),
    })
}

async fn run_once(args: &CheckArgs, plan: Plan) -> ExitCode {
    let started = Instant::now();
    let all = nodes::dedupe(plan.fixed.into_iter().chain(plan.from_cmd).collect());
    let results = plan
        .client
        .check_nodes(&all, &plan.desired, args.refresh)
        .await;
    print_results(
        args,
        results,
        &plan.desired,
        plan.expected,
        started.elapsed(),
    )
}

fn print_results(
    args: &CheckArgs,
    mut results: Vec<NodeResult>,
    desired: &DesiredState,
    expected: Option<usize>,
    elapsed: Duration,
) -> ExitCode {
    output::sort_results(&mut results);
    let text = match args.output {
        Format::Json => {
            let doc = output::json_document(&results, desired, expected, elapsed);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )
        }
        Format::Table => {
            let mut t = output::table(&results);
            if args.show_reports {
                t.push_str(&output::reports_text(&results));
                t.push('\n');
            }
            t.push_str(&output::summary(&results, expected));
            t.push('\n');
            t
        }
    };
    // A closed stdout (| head) must not turn a verdict into a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if output::pool_converged(&results, expected) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

enum End {
    Converged,
    TimedOut,
    Interrupted,
}

async fn run_wait(args: &CheckArgs, plan: Plan, limit: Duration) -> ExitCode {
    let started = Instant::now();
    let deadline = tokio::time::sleep_until(started + limit);
    tokio::pin!(deadline);
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let mut watch = PoolWatch::new(plan.client, plan.desired.clone(), WatchOptions::default());
    let merged =
        |from_cmd: &[Node]| nodes::dedupe(plan.fixed.iter().chain(from_cmd).cloned().collect());
    // The first node set is one line, not one "added" per node.
    let first = watch.set_nodes(&merged(&plan.from_cmd)).len();
    progress.note(
        &format!("watching {first} node{}", if first == 1 { "" } else { "s" }),
        started.elapsed(),
    );

    // --nodes-cmd rounds run beside the event loop so a slow kubectl never
    // holds up events, the deadline or Ctrl-C.
    let (cmd_tx, mut cmd_rx) = mpsc::channel(1);
    let cmd_task = args.nodes_cmd.clone().map(|cmd| {
        let (port, every, limit) = (args.port, args.nodes_cmd_interval, args.nodes_cmd_timeout);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let r = source::run_nodes_cmd(&cmd, port, limit).await;
                if cmd_tx.send(r).await.is_err() {
                    return;
                }
            }
        })
    });
    let (int_tx, mut int_rx) = mpsc::channel::<()>(1);
    let int_task = tokio::spawn(async move {
        // If the handler cannot be installed, Ctrl-C keeps its default
        // (terminate); waiting on nothing keeps the loop running.
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = int_tx.send(()).await;
        } else {
            std::future::pending::<()>().await;
        }
    });
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut last_cmd_error: Option<String> = None;
    let expected = plan.expected;
    let done = |w: &PoolWatch| {
        w.state().all_converged() && w.state().counts().total >= expected.unwrap_or(0)
    };

    let end = loop {
        if done(&watch) {
            break End::Converged;
        }
        tokio::select! {
            changes = watch.next() => progress.changes(&changes, started.elapsed()),
            Some(r) = cmd_rx.recv() => match r {
                Ok(listed) => {
                    last_cmd_error = None;
                    let changes = watch.set_nodes(&merged(&listed));
                    progress.changes(&changes, started.elapsed());
                }
                Err(e) => {
                    // Keep the last node set: a failing kubectl during a
                    // rollout must not empty the pool.
                    if last_cmd_error.as_deref() != Some(e.as_str()) {
                        progress.note(&format!("{e} (keeping the last node set)"), started.elapsed());
                        last_cmd_error = Some(e);
                    }
                }
            },
            _ = ticker.tick() => progress.tick(watch.state().counts(), expected, started.elapsed()),
            () = &mut deadline => break End::TimedOut,
            Some(()) = int_rx.recv() => break End::Interrupted,
        }
    };
    if let Some(t) = cmd_task {
        t.abort();
    }
    int_task.abort();
    progress.finish();
    match end {
        End::Converged => {}
        End::TimedOut => eprintln!(
            "sandbox-readiness check: not converged within {}",
            client::fmt_duration(limit)
        ),
        End::Interrupted => eprintln!("sandbox-readiness check: interrupted; the state so far:"),
    }
    let results = watch.state().results();
    drop(watch);
    print_results(args, results, &plan.desired, expected, started.elapsed())
}
