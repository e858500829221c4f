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
    desired::findings::{self, Combined},
    fleet::{
        self,
        nodes::{Node, DEFAULT_PORT},
        render::{self, Progress},
        result::{count_matches, node_reason, pool_converged, sort_results, AskError, NodeResult},
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
    /// Nodes to ask, comma-separated (repeatable): HOST, HOST:PORT, IPv4, [IPv6], [IPv6]:PORT, each optionally NAME=… (the row's name, and the certificate's under --tls-server-name-from-node).
    #[arg(short = 'n', long = "nodes", value_name = "NODES")]
    pub nodes: Vec<String>,
    /// A file of nodes, one per line; '#' starts a comment (repeatable).
    #[arg(long, value_name = "FILE")]
    pub nodes_file: Vec<PathBuf>,
    /// The JSON of `kubectl get nodes -o json` or `kubectl get machines -o json` ('-' for stdin): each node's (or Cluster API Machine's) InternalIP, rows labelled by node (or Machine) name; a file is read again every round of --wait.
    #[arg(long, value_name = "FILE|-")]
    pub kube_nodes: Option<PathBuf>,
    /// A shell command printing nodes (NodeList or MachineList JSON, or one per line); re-run every round of --wait to follow a rollout.
    #[arg(long, value_name = "CMD")]
    pub nodes_cmd: Option<String>,
    /// How often --nodes-cmd is re-run (and a --kube-nodes file re-read) during --wait.
    #[arg(long, visible_alias = "poll", value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub nodes_cmd_interval: Duration,
    /// Deadline for one run of --nodes-cmd.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub nodes_cmd_timeout: Duration,
    /// The pool has not converged while fewer than N nodes exist (for Machines: while other than N exist, Machines being deleted not counted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub expect_nodes: Option<u32>,
    /// The expected count (as --expect-nodes) is `spec.replicas` of the MachineDeployment in this file, the JSON of `kubectl get machinedeployment NAME -o json` ('-' for stdin); a file is read again every round of --wait.
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["expect_nodes", "expect_cmd"])]
    pub expect_from: Option<PathBuf>,
    /// A shell command printing the MachineDeployment whose `spec.replicas` is the expected count, e.g. 'kubectl get machinedeployment pool-a -o json'; re-run every round of --wait (same interval and deadline as --nodes-cmd).
    #[arg(long, value_name = "CMD", conflicts_with = "expect_nodes")]
    pub expect_cmd: Option<String>,
    /// The pool's desired state from its own configuration: a Talos machine config (one or more documents), a TalosConfig or TalosConfigTemplate (bootstrap.cluster.x-k8s.io v1alpha3 or v1beta1), or a List of those, in JSON or YAML as kubectl prints them ('-' for stdin); its sysctls join --sysctl (which wins, with a TEMPLATE_DISAGREES finding); a file is read again every round of --wait.
    #[arg(long, value_name = "FILE|-", conflicts_with = "desired_cmd")]
    pub desired_from: Option<PathBuf>,
    /// A shell command printing the same, e.g. 'kubectl -n tenant-a get talosconfigtemplate NAME -o yaml'; re-run every round of --wait (same interval and deadline as --nodes-cmd).
    #[arg(long, value_name = "CMD")]
    pub desired_cmd: Option<String>,
    /// Which item of a List --desired-from/--desired-cmd means: [NAMESPACE/]NAME.
    #[arg(long, value_name = "[NAMESPACE/]NAME")]
    pub desired_name: Option<String>,
    /// Read every node's sandbox condition, heartbeat and sandbox-readiness.io/desired annotation from the NodeList of --kube-nodes or --nodes-cmd instead of dialling the agents (a stale heartbeat is unknown; with --desired-from/--desired-cmd or --sysctl and the requirements, each node's annotation must cover the pool's desired state).
    #[arg(long)]
    pub from_node_conditions: bool,
    /// The Node condition type read under --from-node-conditions (serve and the controller have the same flag and default).
    #[arg(long, value_name = "TYPE", default_value = sandbox_readiness::nodestatus::DEFAULT_CONDITION_TYPE, requires = "from_node_conditions")]
    pub condition_type: String,
    /// Under --from-node-conditions, a condition whose heartbeat is older is unknown (the agent heartbeats every 5m and writes within 1s of a change; the controller's --stale-after default is the same).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration, requires = "from_node_conditions")]
    pub max_heartbeat_age: Duration,
    /// Port for nodes given without one [default: 10150].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// At most this many nodes are connected to or asked at once [default: 256].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub parallel: Option<u32>,
    /// Deadline per node (connecting included) [default: 5s, or 30s when the desired state requires a CRI canary or the sandbox probe: those start sandboxes on the node, which takes seconds].
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Deadline for resolving and connecting to one node [default: 2s].
    #[arg(long, value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,
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

/// `--timeout` when not given: what a cached answer needs, unless the
/// question makes the agent start a sandbox first (its own request deadline
/// is 30 s, `serve --request-timeout`).
fn default_timeout(desired: &DesiredState) -> Duration {
    if desired.require_sandbox_probe || !desired.require_canary.is_empty() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(5)
    }
}

impl CheckArgs {
    fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

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
            expect_from: self.expect_from.clone(),
            expect_cmd: self.expect_cmd.clone(),
            port: self.port(),
            parallel: self.parallel.unwrap_or(256),
            timeout: self.timeout.unwrap_or_else(|| default_timeout(&desired)),
            connect_timeout: self.connect_timeout.unwrap_or(Duration::from_secs(2)),
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
    // Refused before anything is read or run.
    if args.from_node_conditions {
        if let Err(e) = super::check_nodes::refuse_dial_flags(&args) {
            return Outcome::failed(WHO, e);
        }
    }
    let intent = match args.desired.to_desired() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(WHO, e),
    };
    // The pool's own configuration, read once before anything is asked:
    // bad input is one line and exit 2 here.
    let pool = match desired_source(&args) {
        Err(e) => return Outcome::failed(WHO, e),
        Ok(None) => None,
        Ok(Some(src)) => {
            match source::read_desired(&src, args.desired_name.as_deref(), args.nodes_cmd_timeout)
                .await
            {
                Ok(p) => Some(findings::combine(&intent, &p)),
                Err(e) => return Outcome::failed(WHO, e),
            }
        }
    };
    if args.from_node_conditions {
        return super::check_nodes::run(&args, intent, pool).await;
    }
    let desired = pool
        .as_ref()
        .map_or_else(|| intent.clone(), |c| c.desired.clone());
    if let Err(e) = sandbox_readiness::evaluate::validate(&desired) {
        return Outcome::failed(WHO, e);
    }
    let plan = match fleet::prepare(&args.to_config(desired)).await {
        Ok(p) => p,
        Err(e) => return Outcome::failed(WHO, e),
    };
    let run = Run {
        args: &args,
        intent,
        pool,
    };
    match args.wait {
        None => run_once(&run, plan).await,
        Some(limit) => run_wait(&run, plan, limit).await,
    }
}

/// What a run of `check` holds besides the flags: the operator's intent
/// (`--sysctl` and the requirements) and, with `--desired-from`/`--desired-cmd`,
/// the pool's configuration combined with it.
struct Run<'a> {
    args: &'a CheckArgs,
    intent: DesiredState,
    pool: Option<Combined>,
}

/// `--desired-from`/`--desired-cmd`, refusing stdin twice and a name
/// without a source.
fn desired_source(args: &CheckArgs) -> Result<Option<source::DocSource>, String> {
    let src = source::DocSource::from_flags(args.desired_from.as_ref(), args.desired_cmd.as_ref());
    if src.is_none() && args.desired_name.is_some() {
        return Err("--desired-name needs --desired-from or --desired-cmd".into());
    }
    let stdin = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if src.as_ref().is_some_and(source::DocSource::is_stdin)
        && (stdin(&args.kube_nodes) || stdin(&args.expect_from))
    {
        return Err(
            "only one of --kube-nodes, --expect-from and --desired-from can read stdin ('-')"
                .into(),
        );
    }
    Ok(src)
}

/// The pool's configuration for people: one row per key with its source,
/// then the pool findings.
pub(super) fn desired_text(c: &Combined) -> String {
    let mut t = String::from("DESIRED (from the pool's configuration):\n");
    let width = c.rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    for r in &c.rows {
        let v = r.value.as_deref().unwrap_or("-");
        t.push_str(&format!("  {:width$}  {:8}  {}\n", r.key, v, r.source));
    }
    for f in &c.findings {
        t.push_str(&format!("{} {}\n", f.code, f.message));
    }
    t
}

pub(super) fn desired_json(c: &Combined) -> serde_json::Value {
    serde_json::json!({
        "sysctls": c.rows.iter().map(|r| serde_json::json!({
            "name": r.key, "value": r.value, "source": r.source,
        })).collect::<Vec<_>>(),
        "findings": c.findings.iter().map(|f| serde_json::json!({
            "code": f.code, "key": f.key, "message": f.message,
        })).collect::<Vec<_>>(),
    })
}

/// Machines being deleted and Machines without an address are rows of
/// their own, never asked.
fn not_asked(node: &Node) -> Option<NodeResult> {
    let error = if node.is_leaving() {
        AskError::Leaving
    } else if node.is_pending() {
        AskError::Pending
    } else {
        return None;
    };
    Some(NodeResult {
        node: node.clone(),
        outcome: Err(error),
        elapsed: Duration::ZERO,
        boot_id_changes: 0,
    })
}

async fn run_once(run: &Run<'_>, plan: Plan) -> Outcome {
    let args = run.args;
    let started = Instant::now();
    let all = plan.nodes_with(&plan.from_kube, &plan.from_cmd);
    let (standing, asked): (Vec<Node>, Vec<Node>) =
        all.into_iter().partition(|n| not_asked(n).is_some());
    let mut results = plan
        .client
        .check_nodes(&asked, &plan.desired, args.refresh)
        .await;
    results.extend(standing.iter().filter_map(not_asked));
    print_results(
        args,
        results,
        &plan.desired,
        run.pool.as_ref(),
        plan.expected,
        started.elapsed(),
    )
}

fn print_results(
    args: &CheckArgs,
    mut results: Vec<NodeResult>,
    desired: &DesiredState,
    pool: Option<&Combined>,
    expected: Option<usize>,
    elapsed: Duration,
) -> Outcome {
    sort_results(&mut results);
    let text = match args.output {
        Format::Json => {
            let mut doc = render::json_document(&results, desired, expected, elapsed);
            if let (Some(c), Some(obj)) = (pool, doc.as_object_mut()) {
                obj.insert("poolDesired".into(), desired_json(c));
            }
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
            if let Some(c) = pool {
                t.push_str(&desired_text(c));
            }
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

/// The nodes the listings name, split into those watched and those shown
/// without asking (Machines leaving or pending).
struct Listing {
    watched: Vec<Node>,
    standing: Vec<Node>,
}

impl Listing {
    fn new(all: Vec<Node>) -> Self {
        let (standing, watched) = all.into_iter().partition(|n| not_asked(n).is_some());
        Listing { watched, standing }
    }

    fn pending(&self) -> usize {
        self.standing.iter().filter(|n| n.is_pending()).count()
    }

    fn machines(&self) -> bool {
        self.watched
            .iter()
            .chain(&self.standing)
            .any(|n| n.machine.is_some())
    }

    /// One note per Machine that became leaving or pending since `before`.
    fn notes(&self, before: Option<&Listing>) -> Vec<String> {
        self.standing
            .iter()
            .filter(|n| before.is_none_or(|b| !b.standing.contains(n)))
            .filter_map(|n| {
                not_asked(n).map(|r| format!("{}: {}", n.name, node_reason(&r.outcome)))
            })
            .collect()
    }
}

/// Re-reads a node source every `every` beside the event loop, so a slow
/// kubectl never holds up events, the deadline or Ctrl-C.
fn relist<T, F, Fut>(
    every: Duration,
    read: F,
) -> (
    mpsc::Receiver<Result<T, String>>,
    tokio::task::JoinHandle<()>,
)
where
    T: Send + 'static,
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, String>> + Send,
{
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if tx.send(read().await).await.is_err() {
                return;
            }
        }
    });
    (rx, task)
}

async fn run_wait(run: &Run<'_>, plan: Plan, limit: Duration) -> Outcome {
    let args = run.args;
    let mut pool = run.pool.clone();
    let started = Instant::now();
    let deadline = tokio::time::sleep_until(started + limit);
    tokio::pin!(deadline);
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let mut watch = PoolWatch::new(
        plan.client.clone(),
        plan.desired.clone(),
        WatchOptions::default(),
    );
    let (mut from_kube, mut from_cmd) = (plan.from_kube.clone(), plan.from_cmd.clone());
    let mut listing = Listing::new(plan.nodes_with(&from_kube, &from_cmd));
    // The first node set is one line, not one "added" per node.
    let first = watch.set_nodes(&listing.watched).len();
    progress.note(
        &format!("watching {first} node{}", if first == 1 { "" } else { "s" }),
        started.elapsed(),
    );
    for n in listing.notes(None) {
        progress.note(&n, started.elapsed());
    }
    for f in pool.iter().flat_map(|c| &c.findings) {
        progress.note(&format!("{} {}", f.code, f.message), started.elapsed());
    }

    let every = args.nodes_cmd_interval;
    let (mut cmd_rx, cmd_task) = match args.nodes_cmd.clone() {
        Some(cmd) => {
            let (port, limit) = (args.port(), args.nodes_cmd_timeout);
            let (rx, t) = relist(every, move || {
                let cmd = cmd.clone();
                async move { source::run_nodes_cmd(&cmd, port, limit).await }
            });
            (Some(rx), Some(t))
        }
        None => (None, None),
    };
    // Stdin cannot be read twice; a file is re-read like --nodes-cmd re-runs.
    let kube_file = args.kube_nodes.clone().filter(|p| p.as_os_str() != "-");
    let (mut kube_rx, kube_task) = match kube_file {
        Some(path) => {
            let port = args.port();
            let (rx, t) = relist(every, move || {
                let path = path.clone();
                async move {
                    tokio::task::spawn_blocking(move || source::read_kube_nodes(&path, port))
                        .await
                        .unwrap_or_else(|e| Err(format!("--kube-nodes: {e}")))
                }
            });
            (Some(rx), Some(t))
        }
        None => (None, None),
    };
    // The expected count, re-read like the node list (stdin only once).
    let expect_source =
        source::ExpectSource::from_flags(args.expect_from.as_ref(), args.expect_cmd.as_ref())
            .filter(|s| *s != source::ExpectSource::File("-".into()));
    let (mut expect_rx, expect_task) = match expect_source {
        Some(src) => {
            let limit = args.nodes_cmd_timeout;
            let (rx, t) = relist(every, move || {
                let src = src.clone();
                async move { source::read_expected(&src, limit).await }
            });
            (Some(rx), Some(t))
        }
        None => (None, None),
    };
    // The pool's configuration, re-read like the expected count (stdin once).
    let desired_src = desired_source(args)
        .ok()
        .flatten()
        .filter(|s| !s.is_stdin());
    let (mut desired_rx, desired_task) = match desired_src {
        Some(src) => {
            let (limit, name) = (args.nodes_cmd_timeout, args.desired_name.clone());
            let (rx, t) = relist(every, move || {
                let (src, name) = (src.clone(), name.clone());
                async move { source::read_desired(&src, name.as_deref(), limit).await }
            });
            (Some(rx), Some(t))
        }
        None => (None, None),
    };
    let mut desired_failing = false;
    async fn next_listing<T>(
        rx: &mut Option<mpsc::Receiver<Result<T, String>>>,
    ) -> Result<T, String> {
        match rx {
            Some(rx) => match rx.recv().await {
                Some(r) => r,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
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
    let mut last_error: Option<String> = None;
    let mut last_expect_error: Option<String> = None;
    let mut expected = plan.expected;
    // Every watched node converged, no Machine still waits for an address,
    // and the members (Machines being deleted are not) are as many as expected.
    let done = |w: &PoolWatch, l: &Listing, expected: Option<usize>| {
        let members = w.state().counts().total + l.pending();
        w.state().all_converged()
            && l.pending() == 0
            && count_matches(members, expected, l.machines())
    };

    let end = loop {
        if done(&watch, &listing, expected) {
            break End::Converged;
        }
        let relisted = tokio::select! {
            changes = watch.next() => {
                progress.changes(&changes, started.elapsed());
                None
            }
            r = next_listing(&mut cmd_rx) => Some(r.map(|n| from_cmd = n)),
            r = next_listing(&mut kube_rx) => Some(r.map(|n| from_kube = n)),
            r = next_listing(&mut expect_rx) => {
                match r {
                    Ok(n) => {
                        last_expect_error = None;
                        if expected != Some(n) {
                            let was = expected.map_or("-".into(), |e| e.to_string());
                            progress.note(&format!("expected nodes: {was} → {n}"), started.elapsed());
                            expected = Some(n);
                        }
                    }
                    // Keep the last count, as the last node set is kept.
                    Err(e) if last_expect_error.as_deref() != Some(e.as_str()) => {
                        progress.note(&format!("{e} (keeping the last expected count)"), started.elapsed());
                        last_expect_error = Some(e);
                    }
                    Err(_) => {}
                }
                None
            }
            r = next_listing(&mut desired_rx) => {
                match r {
                    Ok(p) => {
                        desired_failing = false;
                        let next = findings::combine(&run.intent, &p);
                        let before = pool.as_ref().map(|c| c.rows.clone()).unwrap_or_default();
                        for line in findings::changes(&before, &next.rows) {
                            progress.note(&format!("desired: {line}"), started.elapsed());
                        }
                        if pool.as_ref().map(|c| &c.findings) != Some(&next.findings) {
                            for f in &next.findings {
                                progress.note(&format!("{} {}", f.code, f.message), started.elapsed());
                            }
                        }
                        let judged = pool.as_ref().map(|c| &c.desired);
                        if judged != Some(&next.desired) {
                            if let Err(e) = sandbox_readiness::evaluate::validate(&next.desired) {
                                progress.note(&format!("{e} (keeping the last desired state)"), started.elapsed());
                            } else {
                                let changes = watch.set_desired(next.desired.clone());
                                progress.changes(&changes, started.elapsed());
                                pool = Some(next);
                            }
                        } else {
                            pool = Some(next);
                        }
                    }
                    // Keep the last good desired state, and say so once.
                    Err(e) if !desired_failing => {
                        progress.note(&format!("{e} (keeping the last desired state)"), started.elapsed());
                        desired_failing = true;
                    }
                    Err(_) => {}
                }
                None
            }
            _ = ticker.tick() => {
                progress.tick(watch.state().counts(), expected, started.elapsed());
                None
            }
            () = &mut deadline => break End::TimedOut,
            Some(()) = int_rx.recv() => break End::Interrupted,
        };
        match relisted {
            None => {}
            Some(Ok(())) => {
                last_error = None;
                let next = Listing::new(plan.nodes_with(&from_kube, &from_cmd));
                let changes = watch.set_nodes(&next.watched);
                progress.changes(&changes, started.elapsed());
                for n in next.notes(Some(&listing)) {
                    progress.note(&n, started.elapsed());
                }
                listing = next;
            }
            // Keep the last node set: a failing kubectl during a rollout
            // must not empty the pool.
            Some(Err(e)) if last_error.as_deref() != Some(e.as_str()) => {
                progress.note(
                    &format!("{e} (keeping the last node set)"),
                    started.elapsed(),
                );
                last_error = Some(e);
            }
            Some(Err(_)) => {}
        }
    };
    for t in cmd_task
        .into_iter()
        .chain(kube_task)
        .chain(expect_task)
        .chain(desired_task)
    {
        t.abort();
    }
    int_task.abort();
    progress.finish();
    match end {
        End::Converged => {}
        End::TimedOut => eprintln!("{WHO}: not converged within {}", fmt_duration(limit)),
        End::Interrupted => eprintln!("{WHO}: interrupted; the state so far:"),
    }
    let mut results = watch.state().results();
    drop(watch);
    results.extend(listing.standing.iter().filter_map(not_asked));
    let judged = pool.as_ref().map_or(&plan.desired, |c| &c.desired);
    print_results(
        args,
        results,
        judged,
        pool.as_ref(),
        expected,
        started.elapsed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timeout_waits_longer_only_for_sandboxes_started_on_the_node() {
        let plain = DesiredState {
            require_userns: true,
            ..DesiredState::default()
        };
        assert_eq!(default_timeout(&plain), Duration::from_secs(5));
        let canary = DesiredState {
            require_canary: vec!["runc".into()],
            ..DesiredState::default()
        };
        assert_eq!(default_timeout(&canary), Duration::from_secs(30));
        let sandbox = DesiredState {
            require_sandbox_probe: true,
            ..DesiredState::default()
        };
        assert_eq!(default_timeout(&sandbox), Duration::from_secs(30));
    }
}
