//! Asking agents: one `Check` per node, all nodes in parallel under a bound,
//! each under its own connect timeout and deadline.
//!
//! A node's deadline starts when it gets one of the `parallel` slots, and
//! every await on the way (resolving, connecting, TLS, the call) sits under
//! it, so a node that hangs costs its own slot for at most the deadline and
//! never delays another node beyond that.

use std::{collections::HashMap, error::Error as StdError, fmt, io, sync::Arc, time::Duration};

use tokio::{
    sync::Semaphore,
    task::JoinSet,
    time::{timeout_at, Instant},
};
use tokio_rustls::rustls;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::{
    dial::{self, DialError},
    nodes::{Address, Node},
    result::{Answer, AskError, NodeResult},
};
use crate::{
    proto::v1::{readiness_service_client::ReadinessServiceClient, CheckRequest, DesiredState},
    text::error_chain,
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
    /// With `name_from_node` each agent's certificate must hold its node's
    /// name (see [`node_server_name`]) rather than the address dialled, so
    /// one node's key cannot answer for another node.
    Tls {
        config: Box<ClientTlsConfig>,
        identity: bool,
        name_from_node: bool,
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

    fn endpoint(&self, node: &Node, addr: &Address) -> Result<Endpoint, AskError> {
        let tls = match &self.opts.transport {
            Transport::Plaintext { allow_remote } => {
                if !allow_remote && !addr.is_loopback() {
                    return Err(AskError::PlaintextRefused);
                }
                None
            }
            Transport::Tls {
                config,
                name_from_node,
                ..
            } => Some(if *name_from_node {
                (**config)
                    .clone()
                    .domain_name(node_server_name(node, addr)?)
            } else {
                (**config).clone()
            }),
        };
        let mut ep = Endpoint::from_shared(addr.uri(tls.is_some()))
            .map_err(|e| AskError::Connect(error_chain(&e)))?
            .connect_timeout(self.opts.connect_timeout);
        if let Some(cfg) = tls {
            ep = ep
                .tls_config(cfg)
                .map_err(|e| AskError::Tls(error_chain(&e)))?;
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
        let mut ep = self.endpoint(node, addr)?;
        if let Some(k) = keepalive {
            ep = ep
                .http2_keep_alive_interval(k)
                .keep_alive_timeout(self.opts.timeout)
                .keep_alive_while_idle(true);
        }
        let connect_by = Instant::now() + self.opts.connect_timeout;
        let limit = connect_by.min(deadline);
        let reach = match self.opts.transport {
            Transport::Plaintext {
                allow_remote: false,
            } => dial::Reach::LoopbackOnly,
            _ => dial::Reach::Anywhere,
        };
        let dialer = dial::connector(addr.clone(), self.opts.connect_timeout, reach);
        match timeout_at(limit, ep.connect_with_connector(dialer)).await {
            Ok(Ok(ch)) => Ok(ch),
            Ok(Err(e)) => Err(self.hint(self.classify(&e, self.opts.connect_timeout))),
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
        let outcome = self
            .ask(node, desired, refresh, None, deadline)
            .await
            .map(|(answer, _, _)| answer);
        NodeResult {
            node: node.clone(),
            outcome,
            elapsed: started.elapsed(),
            boot_id_changes: 0,
        }
    }

    /// [`Self::check_node`], sending the token of `seen` (the node's last
    /// full answer to the same question): an agent whose answer still holds
    /// says "unchanged" in a few bytes, and `seen`'s answer is the result.
    pub async fn check_node_since(
        &self,
        node: &Node,
        desired: &DesiredState,
        refresh: bool,
        seen: Option<&Seen>,
    ) -> Polled {
        let _slot = self.slot().await;
        let started = Instant::now();
        let deadline = started + self.opts.timeout;
        let (outcome, token, unchanged) =
            match self.ask(node, desired, refresh, seen, deadline).await {
                Ok((answer, token, unchanged)) => (Ok(answer), token, unchanged),
                Err(e) => (Err(e), String::new(), false),
            };
        Polled {
            result: NodeResult {
                node: node.clone(),
                outcome,
                elapsed: started.elapsed(),
                boot_id_changes: 0,
            },
            token,
            unchanged,
        }
    }

    /// The answer, its token, and whether it is `seen`'s answer again.
    async fn ask(
        &self,
        node: &Node,
        desired: &DesiredState,
        refresh: bool,
        seen: Option<&Seen>,
        deadline: Instant,
    ) -> Result<(Answer, String, bool), AskError> {
        let channel = self.connect(node, deadline, None).await?;
        let mut client = ReadinessServiceClient::new(channel);
        let mut req = tonic::Request::new(CheckRequest {
            desired: Some(desired.clone()),
            refresh,
            if_changed_from: seen.map(|s| s.token.clone()).unwrap_or_default(),
        });
        // Tell the agent too, so it stops working for us when we give up.
        req.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let resp = match timeout_at(deadline, client.check(req)).await {
            Ok(r) => r.map_err(|s| self.status_error(&s))?,
            Err(_) => return Err(AskError::NoAnswer(self.opts.timeout)),
        }
        .into_inner();
        if resp.unchanged {
            // Only ever sent for the token we sent, so `seen` is there.
            let seen = seen.ok_or_else(|| {
                AskError::BadAnswer("\"unchanged\" to a question asked for the first time".into())
            })?;
            return Ok((seen.answer.clone(), resp.token, true));
        }
        let report = resp
            .report
            .ok_or_else(|| AskError::BadAnswer("the agent sent no report".into()))?;
        Ok((
            Answer::judge(desired, report, resp.verdict),
            resp.token,
            false,
        ))
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
        self.each(
            nodes,
            |node| {
                let (client, node, desired) = (self.clone(), node.clone(), Arc::clone(&desired));
                async move { client.check_node(&node, &desired, refresh).await }
            },
            lost,
        )
        .await
    }

    /// [`Self::check_nodes`] with each node's last full answer, as
    /// [`Self::check_node_since`] uses it ([`super::poll::Poller`] keeps them).
    pub async fn check_nodes_since(
        &self,
        nodes: &[Node],
        desired: &DesiredState,
        refresh: bool,
        seen: &HashMap<Node, Arc<Seen>>,
    ) -> Vec<Polled> {
        let desired = Arc::new(desired.clone());
        self.each(
            nodes,
            |node| {
                let (client, desired) = (self.clone(), Arc::clone(&desired));
                let (node, last) = (node.clone(), seen.get(node).cloned());
                async move {
                    client
                        .check_node_since(&node, &desired, refresh, last.as_deref())
                        .await
                }
            },
            |node| Polled {
                result: lost(node),
                token: String::new(),
                unchanged: false,
            },
        )
        .await
    }

    /// Runs `ask` for every node at once (each call takes its own
    /// `parallel` slot); results in the order given, `lost(node)` for a
    /// task that failed. Generic so the binary carries only the variant it
    /// calls.
    async fn each<R, Fut>(
        &self,
        nodes: &[Node],
        ask: impl Fn(&Node) -> Fut,
        lost: impl Fn(&Node) -> R,
    ) -> Vec<R>
    where
        R: Send + 'static,
        Fut: std::future::Future<Output = R> + Send + 'static,
    {
        let mut set = JoinSet::new();
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            index.insert(set.spawn(ask(node)).id(), i);
        }
        let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(nodes.len()).collect();
        while let Some(joined) = set.join_next_with_id().await {
            let (id, result) = match joined {
                Ok((id, r)) => (id, Some(r)),
                Err(e) => (e.id(), None),
            };
            let Some(&i) = index.get(&id) else { continue };
            let result = result.or_else(|| nodes.get(i).map(&lost));
            if let Some(slot) = out.get_mut(i) {
                *slot = result;
            }
        }
        out.into_iter().flatten().collect()
    }
}

/// The result for a node whose task failed.
fn lost(node: &Node) -> NodeResult {
    NodeResult {
        node: node.clone(),
        outcome: Err(AskError::Internal(
            "the task asking this node failed".into(),
        )),
        elapsed: Duration::ZERO,
        boot_id_changes: 0,
    }
}

/// A node's last full answer and the token it came with.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub token: String,
    pub answer: Answer,
}

/// One node's result from [`Client::check_node_since`].
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    pub result: NodeResult,
    /// The answer's token (empty when the node could not be asked, or the
    /// agent predates tokens).
    pub token: String,
    /// The agent said "unchanged": `result` holds the last full answer.
    pub unchanged: bool,
}

/// The name an agent's certificate must hold under `name_from_node`: the
/// node's name (the Kubernetes node name from `--kube-nodes` or
/// `--nodes-cmd`); a node written as `HOST` or `HOST:PORT` has no name but
/// its address, so it is its host.
pub fn node_server_name(node: &Node, addr: &Address) -> Result<String, AskError> {
    // A Machine's agent holds a certificate for its node, not the Machine.
    let name = if let Some(node_name) = node.node_name() {
        node_name.to_string()
    } else if node.name == addr.to_string() {
        addr.host.to_string()
    } else {
        node.name.clone()
    };
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .map_or(name.clone(), str::to_string);
    match rustls::pki_types::ServerName::try_from(name.as_str()) {
        Ok(_) => Ok(name),
        Err(_) => Err(AskError::Tls(format!(
            "node name {name:?} is not a DNS name or IP address a certificate can hold (--tls-server-name-from-node)"
        ))),
    }
}

/// The hint for a TLS failure after the handshake, when no client
/// certificate was offered.
const NO_IDENTITY_HINT: &str =
    " (does the agent require a client certificate? give --tls-cert and --tls-key)";

impl Client {
    /// What a transport failure says about the node, read from the types
    /// in its source chain, never from its text: our dialler's steps, I/O
    /// error kinds, rustls errors and alerts, hyper's and h2's own classes.
    /// `timeout` is the limit that applied (reported for timeouts).
    pub(crate) fn classify(&self, e: &(dyn StdError + 'static), timeout: Duration) -> AskError {
        // hyper and h2 wrap the more telling cause: keep looking, and use
        // their class only when nothing under them says more.
        let mut closed = false;
        let mut protocol = false;
        let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(d) = err.downcast_ref::<DialError>() {
                return match d {
                    DialError::Resolve(_) | DialError::NoAddress => {
                        AskError::Resolve(error_chain(d))
                    }
                    DialError::NotLoopback { .. } => AskError::NotLoopback(error_chain(d)),
                    DialError::Connect(io) => self
                        .io_class(io, timeout)
                        .unwrap_or_else(|| AskError::Connect(error_chain(d))),
                };
            }
            if let Some(r) = err.downcast_ref::<rustls::Error>() {
                return from_rustls(r);
            }
            if let Some(io) = err.downcast_ref::<io::Error>() {
                if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    return from_rustls(r);
                }
                if let Some(a) = self.io_class(io, timeout) {
                    return a;
                }
            }
            if let Some(h) = err.downcast_ref::<h2::Error>() {
                // h2 keeps an I/O failure as its kind and text only, and
                // offers it through `get_io`, not `source`.
                match h.get_io() {
                    Some(io) => {
                        if let Some(a) = self.io_class(io, timeout) {
                            return a;
                        }
                    }
                    None => protocol = true,
                }
            }
            if let Some(h) = err.downcast_ref::<hyper::Error>() {
                closed |= h.is_canceled() || h.is_closed() || h.is_incomplete_message();
                protocol |= h.is_parse();
            }
            if err.downcast_ref::<tonic::TimeoutExpired>().is_some() {
                return AskError::ConnectTimeout(timeout);
            }
            cur = err.source();
        }
        if closed {
            AskError::Closed(String::new())
        } else if protocol {
            AskError::Protocol(String::new())
        } else {
            AskError::Connect(error_chain(e))
        }
    }

    fn io_class(&self, io: &io::Error, timeout: Duration) -> Option<AskError> {
        Some(match io.kind() {
            io::ErrorKind::ConnectionRefused => AskError::Refused,
            io::ErrorKind::TimedOut => AskError::ConnectTimeout(timeout),
            io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof => AskError::Closed(String::new()),
            // tokio-rustls reports every TLS failure as InvalidData; after
            // the handshake h2 keeps only its text (an alert the agent sent).
            io::ErrorKind::InvalidData => match &self.opts.transport {
                Transport::Tls { identity, .. } => AskError::Tls(format!(
                    "{}{}",
                    error_chain(io),
                    if *identity { "" } else { NO_IDENTITY_HINT }
                )),
                Transport::Plaintext { .. } => return None,
            },
            _ => return None,
        })
    }
}

/// A TLS failure in the handshake, where rustls's own error is at hand.
fn from_rustls(e: &rustls::Error) -> AskError {
    match e {
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            AskError::Tls(
                "the agent requires a client certificate: give --tls-cert and --tls-key".into(),
            )
        }
        other => AskError::Tls(error_chain(other)),
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
            return self.hint(self.classify(src, timeout));
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

    #[test]
    fn server_name_from_node_is_its_name_or_its_host() {
        let name = |entry: &str| {
            let n = parse_entry(entry, 10150).unwrap();
            node_server_name(&n, n.address.as_ref().unwrap())
        };
        assert_eq!(name("w1.example").unwrap(), "w1.example");
        assert_eq!(name("w1.example:9000").unwrap(), "w1.example");
        assert_eq!(name("10.0.0.1:9000").unwrap(), "10.0.0.1");
        assert_eq!(name("[fd00::1]:9000").unwrap(), "fd00::1");
        assert_eq!(name("[fd00::1]").unwrap(), "fd00::1");
        let mut kube = node(9000);
        kube.name = "worker-1".into();
        let addr = kube.address.clone().unwrap();
        assert_eq!(node_server_name(&kube, &addr).unwrap(), "worker-1");
        // A Machine row: its node's name once known, else the Machine's.
        kube.name = "md0-58f4d6c9b7-p4lzn".into();
        kube.machine = Some(crate::fleet::nodes::Machine::default());
        assert_eq!(
            node_server_name(&kube, &addr).unwrap(),
            "md0-58f4d6c9b7-p4lzn"
        );
        kube.machine = Some(crate::fleet::nodes::Machine {
            node_name: Some("worker-7".into()),
            deleting: false,
        });
        assert_eq!(node_server_name(&kube, &addr).unwrap(), "worker-7");
        kube.machine = None;
        kube.name = "not a name".into();
        assert!(matches!(
            node_server_name(&kube, &addr),
            Err(AskError::Tls(m)) if m.contains("not a DNS name")
        ));
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
            machine: None,
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
}
