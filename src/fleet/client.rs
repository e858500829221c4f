//! Asking agents: one `Check` per node, all nodes in parallel under a bound,
//! each under its own connect timeout and deadline.
//!
//! A node's deadline starts when it gets one of the `parallel` slots, and
//! every await on the way (resolving, connecting, TLS, the call) sits under
//! it, so a node that hangs costs its own slot for at most the deadline and
//! never delays another node beyond that.

use std::{collections::HashMap, error::Error as StdError, fmt, io, sync::Arc, time::Duration};

use thiserror::Error;
use tokio::{
    sync::Semaphore,
    task::JoinSet,
    time::{timeout_at, Instant},
};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::nodes::{Address, Node};
use crate::{
    evaluate,
    proto::v1::{
        readiness_service_client::ReadinessServiceClient, CheckRequest, DesiredState, Report,
        Verdict,
    },
};

/// How to talk to agents.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Plaintext HTTP/2. Without `allow_remote` only loopback addresses are
    /// dialled: plaintext elsewhere would expose the answers and let anyone
    /// on the path forge a "converged".
    Plaintext { allow_remote: bool },
    /// TLS; `identity` tells whether a client certificate is presented
    /// (mTLS), which decides the hint when an agent drops the connection.
    Tls {
        config: Box<ClientTlsConfig>,
        identity: bool,
    },
}

/// Bounds and transport for asking agents.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Resolving plus TCP connect (plus TLS handshake) must finish within this.
    pub connect_timeout: Duration,
    /// Everything for one node, connect included, must finish within this.
    pub timeout: Duration,
    /// At most this many nodes are being connected to or asked at once.
    pub parallel: usize,
    pub transport: Transport,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            parallel: 256,
            transport: Transport::Plaintext {
                allow_remote: false,
            },
        }
    }
}

/// Why a node could not be asked. One line each; [`AskError::kind`] is a
/// stable word for programs.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AskError {
    #[error("no address: the node lists no InternalIP")]
    NoAddress,
    #[error("plaintext to a non-loopback address refused: give --tls-ca, or --insecure-plaintext")]
    PlaintextRefused,
    #[error("connection refused")]
    Refused,
    #[error("connect timed out after {}", fmt_duration(*.0))]
    ConnectTimeout(Duration),
    #[error("connected, but no answer within {} (agent hung, or not an HTTP/2 server)", fmt_duration(*.0))]
    NoAnswer(Duration),
    #[error("cannot resolve: {0}")]
    Resolve(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("the agent closed the connection{0}")]
    Closed(String),
    #[error("HTTP/2 protocol error{0}")]
    Protocol(String),
    #[error("agent answered {code}: {message}")]
    Rpc { code: String, message: String },
    #[error("bad answer: {0}")]
    BadAnswer(String),
    #[error("watch stream ended")]
    StreamEnded,
    #[error("no message for {} (heartbeats stopped)", fmt_duration(*.0))]
    Idle(Duration),
    #[error("no answer yet")]
    NoAnswerYet,
    #[error("internal error: {0}")]
    Internal(String),
}

impl AskError {
    /// A stable word for `-o json`.
    pub fn kind(&self) -> &'static str {
        match self {
            AskError::NoAddress => "no_address",
            AskError::PlaintextRefused => "plaintext_refused",
            AskError::Refused => "refused",
            AskError::ConnectTimeout(_) => "connect_timeout",
            AskError::NoAnswer(_) => "deadline",
            AskError::Resolve(_) => "resolve",
            AskError::Tls(_) => "tls",
            AskError::Connect(_) => "connect",
            AskError::Closed(_) => "closed",
            AskError::Protocol(_) => "protocol",
            AskError::Rpc { .. } => "rpc",
            AskError::BadAnswer(_) => "bad_answer",
            AskError::StreamEnded => "stream_ended",
            AskError::Idle(_) => "idle",
            AskError::NoAnswerYet => "no_answer_yet",
            AskError::Internal(_) => "internal",
        }
    }

    /// True when retrying cannot help (the same node set would give the
    /// same error), so a watcher reports it once and stops dialling.
    pub fn is_permanent(&self) -> bool {
        matches!(self, AskError::NoAddress | AskError::PlaintextRefused)
    }
}

/// `1.5s`, `200ms`, `5s`.
pub fn fmt_duration(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// What a node answered, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub verdict: Verdict,
    pub report: Report,
}

impl Answer {
    /// Judges a report: locally against `desired` when it asks for anything
    /// (so every agent version is judged by this controller's rules), else
    /// the agent's own verdict against the defaults it was started with.
    pub fn judge(desired: &DesiredState, report: Report, server: Option<Verdict>) -> Answer {
        let verdict = if evaluate::is_empty(desired) {
            server.unwrap_or_else(|| evaluate::evaluate(&report, desired))
        } else {
            evaluate::evaluate(&report, desired)
        };
        Answer { verdict, report }
    }

    /// The node's boot id, empty when the agent could not read it.
    pub fn boot_id(&self) -> &str {
        self.report.node.as_ref().map_or("", |n| n.boot_id.as_str())
    }
}

/// One node's result.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeResult {
    pub node: Node,
    pub outcome: Result<Answer, AskError>,
    /// From the start of asking (or watching) to this result.
    pub elapsed: Duration,
    /// How often the node's boot id changed while it was watched.
    pub boot_id_changes: u32,
}

impl NodeResult {
    pub fn converged(&self) -> bool {
        self.outcome.as_ref().is_ok_and(|a| a.verdict.converged)
    }
}

/// Asks agents. Cheap to clone; clones share the `parallel` bound.
#[derive(Debug, Clone)]
pub struct Client {
    opts: ClientOptions,
    slots: Arc<Semaphore>,
}

impl Client {
    pub fn new(opts: ClientOptions) -> Self {
        let slots = Arc::new(Semaphore::new(opts.parallel.max(1)));
        Client { opts, slots }
    }

    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// Waits for one of the `parallel` slots.
    pub(crate) async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The semaphore is never closed; None would only mean "closed".
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    fn endpoint(&self, addr: &Address) -> Result<Endpoint, AskError> {
        let tls = match &self.opts.transport {
            Transport::Plaintext { allow_remote } => {
                if !allow_remote && !addr.is_loopback() {
                    return Err(AskError::PlaintextRefused);
                }
                None
            }
            Transport::Tls { config, .. } => Some(config),
        };
        let mut ep = Endpoint::from_shared(addr.uri(tls.is_some()))
            .map_err(|e| AskError::Connect(chain(&e)))?
            .connect_timeout(self.opts.connect_timeout)
            .tcp_nodelay(true);
        if let Some(cfg) = tls {
            ep = ep
                .tls_config((**cfg).clone())
                .map_err(|e| AskError::Tls(chain(&e)))?;
        }
        Ok(ep)
    }

    /// Connects to `node`, under the connect timeout and `deadline`.
    pub(crate) async fn connect(
        &self,
        node: &Node,
        deadline: Instant,
        keepalive: Option<Duration>,
    ) -> Result<Channel, AskError> {
        let addr = node.address.as_ref().ok_or(AskError::NoAddress)?;
        let mut ep = self.endpoint(addr)?;
        if let Some(k) = keepalive {
            ep = ep
                .http2_keep_alive_interval(k)
                .keep_alive_timeout(self.opts.timeout)
                .keep_alive_while_idle(true);
        }
        let connect_by = Instant::now() + self.opts.connect_timeout;
        let limit = connect_by.min(deadline);
        match timeout_at(limit, ep.connect()).await {
            Ok(Ok(ch)) => Ok(ch),
            Ok(Err(e)) => Err(self.hint(classify(&e, self.opts.connect_timeout))),
            Err(_) if connect_by <= deadline => {
                Err(AskError::ConnectTimeout(self.opts.connect_timeout))
            }
            // The deadline came first: it was the effective connect limit.
            Err(_) => Err(AskError::ConnectTimeout(self.opts.timeout)),
        }
    }

    /// Asks one node, holding one `parallel` slot for at most the deadline.
    pub async fn check_node(
        &self,
        node: &Node,
        desired: &DesiredState,
        refresh: bool,
    ) -> NodeResult {
        let _slot = self.slot().await;
        let started = Instant::now();
        let deadline = started + self.opts.timeout;
        let outcome = self.ask(node, desired, refresh, deadline).await;
        NodeResult {
            node: node.clone(),
            outcome,
            elapsed: started.elapsed(),
            boot_id_changes: 0,
        }
    }

    async fn ask(
        &self,
        node: &Node,
        desired: &DesiredState,
        refresh: bool,
        deadline: Instant,
    ) -> Result<Answer, AskError> {
        let channel = self.connect(node, deadline, None).await?;
        let mut client = ReadinessServiceClient::new(channel);
        let mut req = tonic::Request::new(CheckRequest {
            desired: Some(desired.clone()),
            refresh,
        });
        // Tell the agent too, so it stops working for us when we give up.
        req.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let resp = match timeout_at(deadline, client.check(req)).await {
            Ok(r) => r.map_err(|s| self.status_error(&s))?,
            Err(_) => return Err(AskError::NoAnswer(self.opts.timeout)),
        }
        .into_inner();
        let report = resp
            .report
            .ok_or_else(|| AskError::BadAnswer("the agent sent no report".into()))?;
        Ok(Answer::judge(desired, report, resp.verdict))
    }

    /// Asks every node, `parallel` at a time; results in the order given.
    /// Never fails as a whole: each node's failure is its own result.
    pub async fn check_nodes(
        &self,
        nodes: &[Node],
        desired: &DesiredState,
        refresh: bool,
    ) -> Vec<NodeResult> {
        let desired = Arc::new(desired.clone());
        let mut set = JoinSet::new();
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let (client, node, desired) = (self.clone(), node.clone(), Arc::clone(&desired));
            let handle =
                set.spawn(async move { client.check_node(&node, &desired, refresh).await });
            index.insert(handle.id(), i);
        }
        let mut out: Vec<Option<NodeResult>> = vec![None; nodes.len()];
        while let Some(joined) = set.join_next_with_id().await {
            let (id, result) = match joined {
                Ok((id, r)) => (id, Some(r)),
                Err(e) => (e.id(), None),
            };
            let Some(&i) = index.get(&id) else { continue };
            let result = result.or_else(|| {
                nodes.get(i).map(|n| NodeResult {
                    node: n.clone(),
                    outcome: Err(AskError::Internal(
                        "the task asking this node failed".into(),
                    )),
                    elapsed: Duration::ZERO,
                    boot_id_changes: 0,
                })
            });
            if let Some(slot) = out.get_mut(i) {
                *slot = result;
            }
        }
        out.into_iter().flatten().collect()
    }
}

/// Every message in an error's source chain, each once, joined by ": ".
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// Maps a transport failure onto the reason a person needs.
pub(crate) fn classify(e: &(dyn StdError + 'static), connect_timeout: Duration) -> AskError {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::ConnectionRefused => return AskError::Refused,
                io::ErrorKind::TimedOut => return AskError::ConnectTimeout(connect_timeout),
                io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof => return AskError::Closed(String::new()),
                _ => {}
            }
            if let Some(inner) = io.get_ref() {
                if inner
                    .downcast_ref::<tokio_rustls::rustls::Error>()
                    .is_some()
                {
                    return AskError::Tls(chain(inner));
                }
            }
        }
        if err.downcast_ref::<tokio_rustls::rustls::Error>().is_some() {
            return AskError::Tls(chain(err));
        }
        if err.downcast_ref::<tonic::TimeoutExpired>().is_some() {
            return AskError::ConnectTimeout(connect_timeout);
        }
        cur = err.source();
    }
    let text = chain(e);
    if text.contains("CertificateRequired") {
        AskError::Tls(
            "the agent requires a client certificate: give --tls-cert and --tls-key".into(),
        )
    } else if text.contains("fatal alert") {
        // The server refused our handshake (rustls reports its alert as text).
        AskError::Tls(text)
    } else if [
        "connection closed",
        "operation was canceled",
        "broken pipe",
        "connection reset",
    ]
    .iter()
    .any(|t| text.contains(t))
    {
        AskError::Closed(String::new())
    } else if text.contains("h2 protocol error") || text.contains("http2 error") {
        AskError::Protocol(String::new())
    } else if text.contains("dns error") {
        AskError::Resolve(text)
    } else {
        AskError::Connect(text)
    }
}

impl Client {
    /// Maps a call's status: one made up on our side (it carries the
    /// transport error as its source) by its cause, the rest as the
    /// agent's answer.
    pub(crate) fn status_error(&self, s: &tonic::Status) -> AskError {
        let timeout = self.opts.timeout;
        if let Some(src) = s.source() {
            let mut cur: Option<&(dyn StdError + 'static)> = Some(src);
            while let Some(err) = cur {
                if err.downcast_ref::<tonic::TimeoutExpired>().is_some() {
                    return AskError::NoAnswer(timeout);
                }
                cur = err.source();
            }
            return self.hint(classify(src, timeout));
        }
        let mut message = s.message().replace(['\n', '\r'], " ");
        if s.code() == tonic::Code::Unimplemented {
            message.push_str(" (is this a sandbox-readiness agent?)");
        }
        AskError::Rpc {
            code: format!("{:?}", s.code()),
            message,
        }
    }

    /// Adds what the transport suggests to a dropped connection: under TLS
    /// 1.3 a server that wants a client certificate rejects it after the
    /// client finished its handshake, so the client often only sees the
    /// connection close.
    fn hint(&self, e: AskError) -> AskError {
        let hint = match &self.opts.transport {
            Transport::Tls {
                identity: false, ..
            } => " (does the agent require a client certificate? give --tls-cert and --tls-key)",
            Transport::Plaintext { .. } => " (does the agent serve TLS? give --tls-ca)",
            Transport::Tls { identity: true, .. } => "",
        };
        match e {
            AskError::Closed(m) if m.is_empty() => AskError::Closed(hint.into()),
            AskError::Protocol(m) if m.is_empty() => AskError::Protocol(hint.into()),
            other => other,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Plaintext {
                allow_remote: false,
            } => f.write_str("plaintext (loopback only)"),
            Transport::Plaintext { allow_remote: true } => f.write_str("plaintext"),
            Transport::Tls { identity: true, .. } => f.write_str("mTLS"),
            Transport::Tls {
                identity: false, ..
            } => f.write_str("TLS"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::fleet::nodes::{parse_entry, Host};
    use std::net::{IpAddr, Ipv4Addr};

    fn node(port: u16) -> Node {
        Node::new(
            format!("n{port}"),
            Address {
                host: Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                port,
            },
        )
    }

    fn opts(timeout_ms: u64) -> ClientOptions {
        ClientOptions {
            connect_timeout: Duration::from_millis(timeout_ms),
            timeout: Duration::from_millis(timeout_ms),
            ..ClientOptions::default()
        }
    }

    /// A port nothing listens on: bind, note the port, close.
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn refused_is_reported_quickly() {
        let c = Client::new(opts(3000));
        let started = std::time::Instant::now();
        let r = c
            .check_node(&node(closed_port()), &DesiredState::default(), false)
            .await;
        assert_eq!(r.outcome, Err(AskError::Refused));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn hung_peer_is_cut_at_the_deadline() {
        // Accepts TCP (the kernel does, from the backlog) and never speaks.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let c = Client::new(ClientOptions {
            connect_timeout: Duration::from_millis(300),
            timeout: Duration::from_millis(600),
            ..ClientOptions::default()
        });
        let started = std::time::Instant::now();
        let r = c
            .check_node(&node(port), &DesiredState::default(), false)
            .await;
        let took = started.elapsed();
        // TCP connects (the kernel accepts from the backlog) and hyper does
        // not wait for the server's preface, so the call is what times out.
        assert_eq!(
            r.outcome,
            Err(AskError::NoAnswer(Duration::from_millis(600)))
        );
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        drop(l);
    }

    #[tokio::test]
    async fn plaintext_goes_to_loopback_only() {
        let c = Client::new(opts(500));
        let remote = parse_entry("192.0.2.1", 9).unwrap();
        let r = c.check_node(&remote, &DesiredState::default(), false).await;
        assert_eq!(r.outcome, Err(AskError::PlaintextRefused));
        let no_addr = Node {
            name: "w".into(),
            address: None,
        };
        let r = c
            .check_node(&no_addr, &DesiredState::default(), false)
            .await;
        assert_eq!(r.outcome, Err(AskError::NoAddress));
    }

    #[tokio::test]
    async fn many_bad_nodes_cost_one_deadline_not_their_count() {
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hung_port = hung.local_addr().unwrap().port();
        let refused = closed_port();
        let mut nodes = Vec::new();
        for i in 0..40u16 {
            // The same address counts once per entry here on purpose: the
            // client does not dedupe, callers do.
            let mut n = node(if i % 2 == 0 { hung_port } else { refused });
            n.name = format!("bad-{i}");
            nodes.push(n);
        }
        let c = Client::new(opts(500));
        let started = std::time::Instant::now();
        let results = c.check_nodes(&nodes, &DesiredState::default(), false).await;
        let took = started.elapsed();
        assert_eq!(results.len(), 40);
        assert!(results.iter().all(|r| r.outcome.is_err()));
        let names: Vec<_> = results.iter().map(|r| r.node.name.clone()).collect();
        let want: Vec<_> = nodes.iter().map(|n| n.name.clone()).collect();
        assert_eq!(names, want);
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(fmt_duration(Duration::from_secs(5)), "5s");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
    }
}
