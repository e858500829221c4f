//! `serve`: flags, converted into the library's [`agent::ServeConfig`].

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use sandbox_readiness::{
    agent::{self, writer::WriterConfig, ServeConfig, Stopped},
    observe::ObserveConfig,
    proto::v1::DesiredState,
    tls::TlsPaths,
};

use super::{
    args::{parse_duration, parse_handler, parse_positive_duration, DesiredArgs, HostArgs},
    exit::Outcome,
};

const WHO: &str = "sandbox-readiness serve";

/// Flags of `serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (repeatable). Outside loopback mTLS is required. The default [::] falls back to 0.0.0.0 where IPv6 is disabled.
    #[arg(
        long = "listen",
        default_value = "[::]:10150",
        env = "SANDBOX_READINESS_LISTEN",
        value_delimiter = ','
    )]
    pub listen: Vec<SocketAddr>,
    /// Server certificate (PEM).
    #[arg(long, env = "SANDBOX_READINESS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, env = "SANDBOX_READINESS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA whose certificates clients must present (PEM).
    #[arg(long, env = "SANDBOX_READINESS_CLIENT_CA", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Accept only client certificates with this DNS or URI subject alternative name (repeatable; the CN does not count). Needs --client-ca.
    #[arg(
        long = "client-name",
        value_name = "NAME",
        env = "SANDBOX_READINESS_CLIENT_NAME",
        value_delimiter = ',',
        requires = "client_ca"
    )]
    pub client_names: Vec<String>,
    /// Also serve Prometheus metrics (GET /metrics, HTTP/1.1) on this address; off by default. Same transport policy as --listen: plaintext only on loopback unless --insecure-plaintext, otherwise TLS with --tls-cert/--tls-key and client certificates from --client-ca.
    #[arg(long, value_name = "ADDR", env = "SANDBOX_READINESS_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Accept only client certificates with this DNS or URI subject alternative name on the metrics port (repeatable; separate from --client-name, so a scrape certificate cannot call the gRPC API). Without it, as --client-name's absence on the gRPC port: any certificate from --client-ca.
    #[arg(
        long = "metrics-client-name",
        value_name = "NAME",
        env = "SANDBOX_READINESS_METRICS_CLIENT_NAME",
        value_delimiter = ',',
        requires = "client_ca",
        requires = "metrics_listen"
    )]
    pub metrics_client_names: Vec<String>,
    /// Serve plaintext (or TLS without client certificates) outside loopback.
    #[arg(long, env = "SANDBOX_READINESS_INSECURE_PLAINTEXT")]
    pub insecure_plaintext: bool,
    /// Cheap re-read of the sysctls.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_POLL_INTERVAL")]
    pub poll_interval: Duration,
    /// Full observation, live probes included.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_PROBE_INTERVAL")]
    pub probe_interval: Duration,
    /// No observation starts sooner than this after the previous one.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "SANDBOX_READINESS_MIN_REFRESH_INTERVAL")]
    pub min_refresh_interval: Duration,
    /// No sandbox probe starts sooner than this after the previous one; a request in between gets the last result.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "SANDBOX_READINESS_MIN_SANDBOX_INTERVAL")]
    pub min_sandbox_interval: Duration,
    /// Heartbeat on Watch streams when nothing changed.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_HEARTBEAT")]
    pub heartbeat: Duration,
    /// Most Watch streams open at once.
    #[arg(long, default_value_t = 4096, env = "SANDBOX_READINESS_MAX_WATCHERS")]
    pub max_watchers: usize,
    /// Most connections held at once (lowered to fit the open-file limit).
    #[arg(
        long,
        default_value_t = 16384,
        env = "SANDBOX_READINESS_MAX_CONNECTIONS"
    )]
    pub max_connections: usize,
    /// Most connections held at once from one IPv4 address or IPv6 /64 (0 = no cap; hidden: for tuning).
    #[arg(
        long,
        hide = true,
        default_value_t = 256,
        env = "SANDBOX_READINESS_MAX_CONNECTIONS_PER_ADDRESS"
    )]
    pub max_connections_per_address: usize,
    /// Most requests in progress at once, all connections together.
    #[arg(
        long,
        default_value_t = 1024,
        env = "SANDBOX_READINESS_MAX_CONCURRENT_REQUESTS"
    )]
    pub max_concurrent_requests: usize,
    /// Deadline for a unary request.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_REQUEST_TIMEOUT")]
    pub request_timeout: Duration,
    /// HTTP/2 ping interval on idle client connections (hidden: for tests).
    #[arg(long, hide = true, default_value = "30s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_KEEPALIVE_INTERVAL")]
    pub keepalive_interval: Duration,
    /// How long a ping's answer may take before the connection is dropped (hidden: for tests).
    #[arg(long, hide = true, default_value = "10s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_KEEPALIVE_TIMEOUT")]
    pub keepalive_timeout: Duration,
    /// Also serve the raw machine id (confidential per machine-id(5)); its app-specific hash is always served.
    #[arg(long, env = "SANDBOX_READINESS_EXPOSE_MACHINE_ID")]
    pub expose_machine_id: bool,
    /// A connection this old gets GOAWAY: its Watch streams end and clients reconnect, so a new CA or a revoked client takes effect on old connections too.
    #[arg(long, default_value = "1h", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_MAX_CONNECTION_AGE")]
    pub max_connection_age: Duration,
    /// A runtime handler the agent may run the CRI canary for (repeatable; `default` is the runtime's default handler). None by default: a canary starts and removes a pod sandbox, so it changes the node.
    #[arg(long = "allow-canary", value_name = "HANDLER", value_parser = parse_handler, env = "SANDBOX_READINESS_ALLOW_CANARY", value_delimiter = ',')]
    pub allow_canary: Vec<String>,
    /// At most one canary per handler per this; a request in between gets the last result (with its age).
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "SANDBOX_READINESS_CANARY_INTERVAL")]
    pub canary_interval: Duration,
    /// Keep this node's Node condition (and with --handler-labels its labels) from the agent's verdict, with this kubeconfig (on Talos the kubelet's, /etc/kubernetes/kubeconfig-kubelet). Off by default. Needs a desired state.
    #[arg(long, value_name = "PATH", env = "SANDBOX_READINESS_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The Node to write; default: NAME of the kubeconfig's system:node:NAME client certificate (any other credential needs this flag).
    #[arg(
        long,
        value_name = "NAME",
        env = "SANDBOX_READINESS_NODE_NAME",
        requires = "kubeconfig"
    )]
    pub node_name: Option<String>,
    /// The Node condition type written (the readiness-gate controller's flag has the same name and default).
    #[arg(long, default_value = sandbox_readiness::nodestatus::DEFAULT_CONDITION_TYPE, env = "SANDBOX_READINESS_CONDITION_TYPE")]
    pub condition_type: String,
    /// Write the condition at least this often when nothing changed (its lastHeartbeatTime).
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_NODE_HEARTBEAT")]
    pub node_heartbeat: Duration,
    /// Also keep sandbox-readiness.io/<handler>=ready|not-ready|unknown labels for every runtime handler the desired state names (for RuntimeClass scheduling.nodeSelector).
    #[arg(
        long,
        env = "SANDBOX_READINESS_HANDLER_LABELS",
        requires = "kubeconfig"
    )]
    pub handler_labels: bool,
    /// Read the Node again this often, so a re-registered Node is rewritten (hidden: for tuning).
    #[arg(long, hide = true, default_value = "10s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_NODE_RESYNC")]
    pub node_resync: Duration,
    /// Deadline of one request to the API server (hidden: for tests).
    #[arg(long, hide = true, default_value = "10s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_NODE_REQUEST_TIMEOUT")]
    pub node_request_timeout: Duration,
    #[command(flatten)]
    pub host: HostArgs,
    /// The desired state `Check` uses when a request carries none.
    #[command(flatten)]
    pub desired: DesiredArgs,
}

impl ServeArgs {
    fn to_config(&self, desired: DesiredState) -> ServeConfig {
        // clap makes --tls-cert and --tls-key come together, and
        // --client-ca only with them.
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsPaths {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.client_ca.clone(),
            }),
            _ => None,
        };
        ServeConfig {
            listen: self.listen.clone(),
            tls,
            insecure_plaintext: self.insecure_plaintext,
            poll_interval: self.poll_interval,
            probe_interval: self.probe_interval,
            min_refresh_interval: self.min_refresh_interval,
            min_sandbox_interval: self.min_sandbox_interval,
            heartbeat: self.heartbeat,
            max_watchers: self.max_watchers,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            max_concurrent_requests: self.max_concurrent_requests,
            request_timeout: self.request_timeout,
            keepalive_interval: self.keepalive_interval,
            keepalive_timeout: self.keepalive_timeout,
            max_connection_age: self.max_connection_age,
            client_names: self.client_names.clone(),
            metrics_listen: self.metrics_listen,
            metrics_client_names: self.metrics_client_names.clone(),
            observe: ObserveConfig {
                expose_machine_id: self.expose_machine_id,
                ..self.host.to_config()
            },
            desired,
            allow_canary: self.allow_canary.clone(),
            canary_interval: self.canary_interval,
            node_writer: self.kubeconfig.as_ref().map(|k| WriterConfig {
                kubeconfig: k.clone(),
                node_name: self.node_name.clone(),
                condition_type: self.condition_type.clone(),
                heartbeat: self.node_heartbeat,
                handler_labels: self.handler_labels,
                request_timeout: self.node_request_timeout,
                resync: self.node_resync,
                desired_annotation: None,
                // Three polls' time, and never less than two minutes (a
                // slow observation, CRI deadlines and a canary fit in it).
                max_observation_age: (self.poll_interval * 3).max(Duration::from_secs(120)),
            }),
        }
    }
}

/// 0 after SIGTERM/SIGINT; 2 when the agent cannot start (or its server
/// fails).
pub async fn run(args: ServeArgs) -> Outcome {
    // The listen/TLS combination is judged before the desired state, as
    // it always was.
    let desired = args.desired.to_desired();
    let mut cfg = args.to_config(DesiredState::default());
    if let Err(e) = agent::check_security(&cfg) {
        return Outcome::failed(WHO, e);
    }
    cfg.desired = match desired {
        Ok(d) => d,
        Err(e) => return Outcome::failed(WHO, e),
    };
    match agent::run(cfg).await {
        Ok(Stopped::Drained) => Outcome::Success,
        Ok(Stopped::GraceExpired) => Outcome::SuccessAbandoning,
        Err(e) => Outcome::failed(WHO, e),
    }
}
