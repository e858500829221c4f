//! `check`: flags, converted into the library's [`fleet::CheckConfig`];
//! then one round of asking, or watching until the pool converged, the
//! deadline passed or Ctrl-C, and the results printed.

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    time::Duration,
};

use clap::Args;
use sandbox_readiness::{
    fleet::{
        self,
        nodes::{Node, DEFAULT_PORT},
        render::{self, Progress},
        result::{pool_converged, sort_results, NodeResult},
        source,
        wait::{PoolWatch, WatchOptions},
        CheckConfig, ClientTlsFiles, Plan,
    },
    proto::v1::DesiredState,
    text::fmt_duration,
};
use tokio::{sync::mpsc, time::Instant};

use super::{
    args::{parse_duration, DesiredArgs, Format},
    exit::Outcome,
};

const WHO: &str = "sandbox-readiness check";

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
    /// Verify each agent against its node's name (the Kubernetes node name; for HOST[:PORT] entries the host), not the address dialled: one node's key cannot answer for another (certificates from `tls init --node`).
    #[arg(long, requires = "tls_ca", conflicts_with = "tls_server_name")]
    pub tls_server_name_from_node: bool,
    /// Talk plaintext to non-loopback addresses (answers can be read and forged on the way).
    #[arg(long, conflicts_with = "tls_ca")]
    pub insecure_plaintext: bool,
    #[command(flatten)]
    pub desired: DesiredArgs,
}

impl CheckArgs {
    fn to_config(&self, desired: DesiredState) -> CheckConfig {
        // clap makes --tls-cert, --tls-key and --tls-server-name need --tls-ca.
        let tls = self.tls_ca.as_ref().map(|ca| ClientTlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
            server_name_from_node: self.tls_server_name_from_node,
        });
        CheckConfig {
            nodes: self.nodes.clone(),
            nodes_files: self.nodes_file.clone(),
            kube_nodes: self.kube_nodes.clone(),
            nodes_cmd: self.nodes_cmd.clone(),
            nodes_cmd_interval: self.nodes_cmd_interval,
            nodes_cmd_timeout: self.nodes_cmd_timeout,
            expect_nodes: self.expect_nodes,
            port: self.port,
            parallel: self.parallel,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            wait: self.wait,
            tls,
            insecure_plaintext: self.insecure_plaintext,
            desired,
        }
    }
}

/// 0 when every node converged, 1 when any did not or could not be asked,
/// 2 for bad usage (one line on stderr, before anything is sent).
///
/// Works on a current-thread or a multi-thread tokio runtime; a
/// multi-thread one spreads TLS handshakes and decoding over the cores.
pub async fn run(args: CheckArgs) -> Outcome {
    let desired = match args.desired.to_desired() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(WHO, e),
    };
    let plan = match fleet::prepare(&args.to_config(desired)).await {
        Ok(p) => p,
        Err(e) => return Outcome::failed(WHO, e),
    };
    match args.wait {
        None => run_once(&args, plan).await,
        Some(limit) => run_wait(&args, plan, limit).await,
    }
}

async fn run_once(args: &CheckArgs, plan: Plan) -> Outcome {
    let started = Instant::now();
    let all = plan.nodes_with(&plan.from_cmd);
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
) -> Outcome {
    sort_results(&mut results);
    let text = match args.output {
        Format::Json => {
            let doc = render::json_document(&results, desired, expected, elapsed);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )
        }
        Format::Table => {
            let mut t = render::table(&results);
            if args.show_reports {
                t.push_str(&render::reports_text(&results));
                t.push('\n');
            }
            t.push_str(&render::summary(&results, expected));
            t.push('\n');
            t
        }
    };
    // A closed stdout (| head) must not turn a verdict into a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Outcome::converged(pool_converged(&results, expected))
}

enum End {
    Converged,
    TimedOut,
    Interrupted,
}

async fn run_wait(args: &CheckArgs, plan: Plan, limit: Duration) -> Outcome {
    let started = Instant::now();
    let deadline = tokio::time::sleep_until(started + limit);
    tokio::pin!(deadline);
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let mut watch = PoolWatch::new(
        plan.client.clone(),
        plan.desired.clone(),
        WatchOptions::default(),
    );
    let merged = |from_cmd: &[Node]| plan.nodes_with(from_cmd);
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
        End::TimedOut => eprintln!("{WHO}: not converged within {}", fmt_duration(limit)),
        End::Interrupted => eprintln!("{WHO}: interrupted; the state so far:"),
    }
    let results = watch.state().results();
    drop(watch);
    print_results(args, results, &plan.desired, expected, started.elapsed())
}
