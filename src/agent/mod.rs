//! The agent (`serve`): keeps a fresh observation and serves it over gRPC,
//! with health and reflection, on one or more listen addresses.

pub mod cached;
pub mod listen;
mod owner;
pub mod service;
pub mod state;
mod tracked;

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::Args;
use thiserror::Error;
use tokio::{net::TcpListener, sync::watch};
use tonic::transport::Server;
use tracing::{info, warn};

use crate::{
    cli::{parse_duration, DesiredArgs, HostArgs},
    proto::v1::{readiness_service_server::ReadinessServiceServer, FILE_DESCRIPTOR_SET},
    tls::{self, AcceptLimits, ReloadOptions, ServerTls, TlsPaths},
};

/// Largest request the agent decodes: requests are tiny.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Flags of `serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (repeatable). Outside loopback mTLS is required.
    #[arg(
        long = "listen",
        default_value = "[::]:50100",
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
    /// Serve plaintext (or TLS without client certificates) outside loopback.
    #[arg(long, env = "SANDBOX_READINESS_INSECURE_PLAINTEXT")]
    pub insecure_plaintext: bool,
    /// Cheap re-read of the sysctls.
    #[arg(long, default_value = "2s", value_parser = parse_duration, env = "SANDBOX_READINESS_POLL_INTERVAL")]
    pub poll_interval: Duration,
    /// Full observation, live probes included.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "SANDBOX_READINESS_PROBE_INTERVAL")]
    pub probe_interval: Duration,
    /// No observation starts sooner than this after the previous one.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "SANDBOX_READINESS_MIN_REFRESH_INTERVAL")]
    pub min_refresh_interval: Duration,
    /// Heartbeat on Watch streams when nothing changed.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "SANDBOX_READINESS_HEARTBEAT")]
    pub heartbeat: Duration,
    /// Most Watch streams open at once.
    #[arg(long, default_value_t = 4096, env = "SANDBOX_READINESS_MAX_WATCHERS")]
    pub max_watchers: usize,
    /// Most connections held at once.
    #[arg(
        long,
        default_value_t = 16384,
        env = "SANDBOX_READINESS_MAX_CONNECTIONS"
    )]
    pub max_connections: usize,
    /// Most requests in progress at once, all connections together.
    #[arg(
        long,
        default_value_t = 1024,
        env = "SANDBOX_READINESS_MAX_CONCURRENT_REQUESTS"
    )]
    pub max_concurrent_requests: usize,
    /// Deadline for a unary request.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "SANDBOX_READINESS_REQUEST_TIMEOUT")]
    pub request_timeout: Duration,
    #[command(flatten)]
    pub host: HostArgs,
    /// The desired state `Check` uses when a request carries none.
    #[command(flatten)]
    pub desired: DesiredArgs,
}

/// Why `serve` could not start (exit code 2).
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("refusing plaintext on {0}: outside loopback the agent needs mTLS (--tls-cert, --tls-key, --client-ca) or --insecure-plaintext")]
    PlaintextOutsideLoopback(SocketAddr),
    #[error("refusing TLS without client certificates on {0}: give --client-ca, or --insecure-plaintext to allow it")]
    NoClientCa(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Desired(#[from] crate::evaluate::DesiredError),
    #[error("cannot build server reflection: {0}")]
    Reflection(String),
    #[error("server failed: {0}")]
    Server(#[from] tonic::transport::Error),
}

/// Checks the listen/TLS combination before anything starts.
pub fn check_security(args: &ServeArgs) -> Result<(), ServeError> {
    for addr in &args.listen {
        if addr.ip().is_loopback() || args.insecure_plaintext {
            continue;
        }
        if args.tls_cert.is_none() {
            return Err(ServeError::PlaintextOutsideLoopback(*addr));
        }
        if args.client_ca.is_none() {
            return Err(ServeError::NoClientCa(*addr));
        }
    }
    Ok(())
}

/// Runs the agent until SIGTERM/SIGINT.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    check_security(&args)?;
    let desired = args.desired.to_desired()?;
    raise_fd_limit();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::load(TlsPaths {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        })?),
        _ => None,
    };
    let mut listeners = Vec::new();
    for addr in &args.listen {
        let l = bind(*addr).map_err(|source| ServeError::Bind {
            addr: *addr,
            source,
        })?;
        listeners.push(l);
    }
    let extra: Vec<String> = desired.sysctls.iter().map(|s| s.name.clone()).collect();
    let cfg = args.host.to_config(extra);
    info!(
        listen = ?args.listen,
        tls = tls.is_some(),
        client_ca = args.client_ca.is_some(),
        poll_interval = %humantime::format_duration(args.poll_interval),
        probe_interval = %humantime::format_duration(args.probe_interval),
        min_refresh_interval = %humantime::format_duration(args.min_refresh_interval),
        cri_endpoint = %cfg.gvisor.cri_endpoint,
        runsc = %cfg.gvisor.runsc_path.display(),
        defaults = ?desired,
        version = crate::observe::node::AGENT_VERSION,
        "starting"
    );
    if args.insecure_plaintext && args.listen.iter().any(|a| !a.ip().is_loopback()) {
        warn!("--insecure-plaintext: serving without mTLS outside loopback; anyone who reaches the port can read this node's report");
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let timing = state::Timing {
        poll: args.poll_interval,
        probe: args.probe_interval,
        min_refresh: args.min_refresh_interval,
    };
    let (state, _owner) = state::start(cfg, timing, shutdown_rx.clone()).await;
    let svc = service::Service::new(
        state.clone(),
        desired,
        args.max_watchers,
        args.heartbeat,
        shutdown_rx.clone(),
    );

    let (health, health_svc) = tonic_health::server::health_reporter();
    health
        .set_serving::<ReadinessServiceServer<service::Service>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;

    let router = Server::builder()
        .max_concurrent_streams(Some(128))
        .concurrency_limit_per_connection(256)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .timeout(args.request_timeout)
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            args.max_concurrent_requests,
        ))
        .add_service(health_svc)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(cached::Readiness::new(
            svc,
            state,
            MAX_REQUEST_BYTES,
            4 * 1024 * 1024,
        ));

    let shutdown = async move {
        wait_for_signal().await;
        info!("stopping");
        let _ = shutdown_tx.send(true);
        // Watch streams end on the signal above; give in-flight unary calls a
        // moment, then leave regardless so SIGTERM never takes over a second.
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            std::process::exit(0);
        });
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(args.max_connections));
    // Both transports feed one connection type, so one server runs either way.
    let (_reloader, connections) = match tls {
        Some(tls) => {
            let reloader = tls.spawn_reloader(ReloadOptions::default())?;
            let limits = AcceptLimits {
                max_handshakes: 1024,
                max_handshakes_per_ip: 64,
                ..AcceptLimits::default()
            };
            let streams = listeners
                .into_iter()
                .map(|l| tls::incoming(l, tls.clone(), limits.clone()))
                .collect();
            (Some(reloader), listen::merge(streams, slots))
        }
        None => {
            let pending = Arc::new(tokio::sync::Semaphore::new(args.max_connections));
            let streams = listeners
                .into_iter()
                .map(|l| listen::plaintext(l, Duration::from_secs(10), pending.clone()))
                .collect();
            (None, listen::merge(streams, slots))
        }
    };
    router
        .serve_with_incoming_shutdown(connections, shutdown)
        .await?;
    Ok(())
}

/// Binds with a deep accept backlog: during a connection flood a good
/// client's SYN must not wait out a retransmit behind the default 128.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Many watchers and connections need file descriptors: raise the soft
/// limit to the hard one (a no-op where it already is).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, initialised rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
