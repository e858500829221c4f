//! The asking side (`check`): ask many agents at once and say, per
//! node and for the pool, whether the desired state is in effect.
//!
//! The parts are a library first, for a controller written in Rust. They
//! import one way: `nodes` ← `result` ← `pool` ← `wait`, with `client`
//! (over `dial`) beside them and `render` on top.
//! - [`nodes`]: which nodes (pure parsing of lists, files, NodeList and
//!   Cluster API MachineList JSON); [`expect`]: the expected count from a
//!   MachineDeployment's `spec.replicas`;
//!   [`source`]: reading them from files, `--nodes-cmd` and `--expect-cmd`;
//! - [`client`]: [`client::Client::check_nodes`] asks every node in
//!   parallel, each under its own connect timeout and deadline, and returns
//!   one [`result::NodeResult`] per node;
//! - [`result`]: a node's answer or why it could not be asked, and what a
//!   person reads about it;
//! - [`pool`]: the pool as watch streams last saw it ([`pool::PoolState`],
//!   [`pool::Change`]);
//! - [`wait`]: [`wait::PoolWatch`] keeps one `Watch` stream per node of a
//!   changing node set and reports [`pool::Change`]s;
//! - [`poll`]: [`poll::Poller`] asks every node once per round, sending
//!   the token of its last answer so an unchanged agent answers in a few
//!   bytes (for controllers that poll rather than watch);
//! - [`render`]: the table, summary line, JSON document and progress.
//!
//! [`prepare`] turns a [`CheckConfig`] into a [`Plan`] (every check that
//! needs no agent); the `check` command runs the plan.

pub mod client;
mod dial;
pub mod expect;
pub mod nodes;
pub mod poll;
pub mod pool;
pub mod render;
pub mod result;
pub mod source;
pub mod wait;

use std::{path::PathBuf, time::Duration};

use thiserror::Error;

use crate::{
    evaluate::{self, DesiredError},
    proto::v1::DesiredState,
    tls::TlsError,
};
use client::{Client, ClientOptions, Transport};
use nodes::{Node, NodesError};

pub use dial::DialError;

/// TLS towards the agents.
#[derive(Debug, Clone, Default)]
pub struct ClientTlsFiles {
    /// CA bundle the agents' certificates chain to (PEM).
    pub ca: PathBuf,
    /// Client certificate and key for mTLS (PEM), both or neither.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Verify agents against this name instead of the address dialled.
    pub server_name: Option<String>,
    /// Verify each agent against its node's name instead of the address
    /// dialled (`client::node_server_name`).
    pub server_name_from_node: bool,
}

/// What `check` is asked to do (the flags, parsed).
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Node lists as written (`-n`), each comma-separated.
    pub nodes: Vec<String>,
    /// Files of nodes, one per line.
    pub nodes_files: Vec<PathBuf>,
    /// `kubectl get nodes -o json` or `kubectl get machines -o json` output
    /// (`-` for stdin); a file is read again every round of `--wait`.
    pub kube_nodes: Option<PathBuf>,
    /// A shell command printing nodes.
    pub nodes_cmd: Option<String>,
    pub nodes_cmd_interval: Duration,
    pub nodes_cmd_timeout: Duration,
    /// The pool has not converged while fewer nodes exist.
    pub expect_nodes: Option<u32>,
    /// The expected count is the `spec.replicas` of the MachineDeployment
    /// in this file (`-` for stdin); a file is read again every round of
    /// `--wait`. Instead of `expect_nodes`.
    pub expect_from: Option<PathBuf>,
    /// The same from a command's output (`kubectl get machinedeployment
    /// NAME -o json`), run like `nodes_cmd`.
    pub expect_cmd: Option<String>,
    /// Port for nodes given without one.
    pub port: u16,
    /// At most this many nodes are connected to or asked at once.
    pub parallel: u32,
    /// Deadline per node, connecting included.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Keep watching for at most this long (`None`: ask once).
    pub wait: Option<Duration>,
    /// `None`: plaintext.
    pub tls: Option<ClientTlsFiles>,
    /// Plaintext to non-loopback addresses too.
    pub insecure_plaintext: bool,
    pub desired: DesiredState,
}

/// Why `check` cannot start. Every variant is bad usage or configuration,
/// found before anything is sent.
#[derive(Debug, Error)]
pub enum CheckError {
    #[error(transparent)]
    Desired(#[from] DesiredError),
    #[error("{flag} must be more than 0")]
    ZeroDuration { flag: &'static str },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("no nodes: give -n/--nodes, --nodes-file, --kube-nodes or --nodes-cmd")]
    NoSource,
    #[error(transparent)]
    Nodes(#[from] NodesError),
    /// A node source could not be read or run (its own one-line message).
    #[error("{0}")]
    Source(String),
    #[error("node {name} ({address}) is not a loopback address: plaintext goes to loopback only; give --tls-ca (with --tls-cert/--tls-key for mTLS), or --insecure-plaintext")]
    PlaintextRemote { name: String, address: String },
    #[error("no nodes to ask: the node sources listed none")]
    NoNodes,
    #[error("--kube-nodes and --expect-from cannot both read stdin ('-')")]
    StdinTwice,
}

/// What running `check` needs once the configuration was checked.
#[derive(Debug)]
pub struct Plan {
    pub desired: DesiredState,
    pub client: Client,
    /// From `nodes` and `nodes_files`; fixed for the whole run.
    pub fixed: Vec<Node>,
    /// The first `kube_nodes` result.
    pub from_kube: Vec<Node>,
    /// The first `nodes_cmd` result.
    pub from_cmd: Vec<Node>,
    pub expected: Option<usize>,
}

impl Plan {
    /// The fixed nodes, `from_kube` and `from_cmd`, each address once.
    pub fn nodes_with(&self, from_kube: &[Node], from_cmd: &[Node]) -> Vec<Node> {
        nodes::dedupe(
            self.fixed
                .iter()
                .chain(from_kube)
                .chain(from_cmd)
                .cloned()
                .collect(),
        )
    }
}

/// Checks the configuration, reads the node sources (running `nodes_cmd`
/// once) and builds the client. Nothing is sent to an agent.
pub async fn prepare(cfg: &CheckConfig) -> Result<Plan, CheckError> {
    evaluate::validate(&cfg.desired)?;
    for (flag, d) in [
        ("--timeout", cfg.timeout),
        ("--connect-timeout", cfg.connect_timeout),
        ("--nodes-cmd-interval", cfg.nodes_cmd_interval),
        ("--nodes-cmd-timeout", cfg.nodes_cmd_timeout),
    ] {
        if d.is_zero() {
            return Err(CheckError::ZeroDuration { flag });
        }
    }
    if cfg.wait.is_some_and(|w| w.is_zero()) {
        return Err(CheckError::ZeroDuration { flag: "--wait" });
    }
    let transport = match &cfg.tls {
        Some(t) => Transport::Tls {
            config: Box::new(crate::tls::client_tls_config(
                &t.ca,
                t.cert.as_deref(),
                t.key.as_deref(),
                t.server_name.as_deref(),
            )?),
            identity: t.cert.is_some(),
            name_from_node: t.server_name_from_node,
        },
        None => Transport::Plaintext {
            allow_remote: cfg.insecure_plaintext,
        },
    };

    if cfg.nodes.is_empty()
        && cfg.nodes_files.is_empty()
        && cfg.kube_nodes.is_none()
        && cfg.nodes_cmd.is_none()
    {
        return Err(CheckError::NoSource);
    }
    let stdin = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if stdin(&cfg.kube_nodes) && stdin(&cfg.expect_from) {
        return Err(CheckError::StdinTwice);
    }
    let from_kube = match &cfg.kube_nodes {
        Some(path) => source::read_kube_nodes(path, cfg.port).map_err(CheckError::Source)?,
        None => Vec::new(),
    };
    let mut fixed = Vec::new();
    for list in &cfg.nodes {
        fixed.extend(nodes::parse_list(list, cfg.port)?);
    }
    for path in &cfg.nodes_files {
        let text = source::read_capped(path, "--nodes-file").map_err(CheckError::Source)?;
        let origin = path.display().to_string();
        fixed.extend(nodes::parse_lines(&text, cfg.port, &origin)?);
    }
    let from_cmd = match &cfg.nodes_cmd {
        Some(cmd) => source::run_nodes_cmd(cmd, cfg.port, cfg.nodes_cmd_timeout)
            .await
            .map_err(CheckError::Source)?,
        None => Vec::new(),
    };
    let expect =
        source::ExpectSource::from_flags(cfg.expect_from.as_ref(), cfg.expect_cmd.as_ref());
    let expected = match expect {
        Some(s) => Some(
            source::read_expected(&s, cfg.nodes_cmd_timeout)
                .await
                .map_err(CheckError::Source)?,
        ),
        None => cfg.expect_nodes.and_then(|n| usize::try_from(n).ok()),
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
            .chain(&from_kube)
            .chain(&from_cmd)
            .find(|n| n.address.as_ref().is_some_and(|a| !a.is_loopback()))
        {
            return Err(CheckError::PlaintextRemote {
                name: n.name.clone(),
                address: n.address_display(),
            });
        }
    }
    let all = nodes::dedupe(
        fixed
            .iter()
            .chain(&from_kube)
            .chain(&from_cmd)
            .cloned()
            .collect(),
    );
    if all.is_empty() && cfg.wait.is_none() {
        return Err(CheckError::NoNodes);
    }
    let client = Client::new(ClientOptions {
        connect_timeout: cfg.connect_timeout,
        timeout: cfg.timeout,
        parallel: usize::try_from(cfg.parallel).unwrap_or(256),
        transport,
    });
    Ok(Plan {
        desired: cfg.desired.clone(),
        client,
        fixed,
        from_kube,
        from_cmd,
        expected,
    })
}
