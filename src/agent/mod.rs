//! The agent (`serve`): keeps a fresh observation and serves it over gRPC,
//! with health and reflection, on one or more listen addresses, and
//! optionally as Prometheus metrics on one more ([`metrics`]).

pub mod cached;
mod canary_retry;
pub mod listen;
pub mod metrics;
mod owner;
pub mod service;
mod source;
pub mod state;
mod token;
mod tracked;
pub mod writer;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use thiserror::Error;
use tokio::{net::TcpListener, sync::watch};
use tonic::transport::Server;
use tracing::{info, warn};

use crate::{
    observe::ObserveConfig,
    proto::v1::{
        readiness_service_server::ReadinessServiceServer, DesiredState, FILE_DESCRIPTOR_SET,
    },
    tls::{self, AcceptLimits, ReloadOptions, ServerTls, TlsPaths},
};

/// Largest request the agent decodes: requests are tiny.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// What `serve` is asked to do (the flags, parsed).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Addresses to listen on. Outside loopback mTLS is required.
    pub listen: Vec<SocketAddr>,
    /// Server certificate, key and (for mTLS) client CA; `None`: plaintext.
    pub tls: Option<TlsPaths>,
    /// Serve plaintext (or TLS without client certificates) outside loopback.
    pub insecure_plaintext: bool,
    /// Cheap re-read of the sysctls.
    pub poll_interval: Duration,
    /// Full observation, live probes included.
    pub probe_interval: Duration,
    /// No observation starts sooner than this after the previous one.
    pub min_refresh_interval: Duration,
    /// No sandbox probe starts sooner than this after the previous one.
    pub min_sandbox_interval: Duration,
    /// Heartbeat on Watch streams when nothing changed.
    pub heartbeat: Duration,
    /// Most Watch streams open at once.
    pub max_watchers: usize,
    /// Most connections held at once (lowered to what the open-file limit
    /// allows, see [`size_limits`]).
    pub max_connections: usize,
    /// Most connections held at once from one IPv4 address or IPv6 /64
    /// (0 = no cap; lowered with `max_connections`).
    pub max_connections_per_address: usize,
    /// Most requests in progress at once, all connections together.
    pub max_concurrent_requests: usize,
    /// Deadline for a unary request.
    pub request_timeout: Duration,
    /// HTTP/2 ping to an idle client connection, and how long its answer
    /// may take before the connection is dropped.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// A connection gets GOAWAY at this age (its Watch streams end then,
    /// and clients reconnect) and is closed [`MAX_AGE_GRACE`] later.
    pub max_connection_age: Duration,
    /// With a client CA: accept only client certificates with one of these
    /// as a DNS or URI subject alternative name (empty: any from the CA).
    pub client_names: Vec<String>,
    /// Serve Prometheus metrics here too (same transport policy as
    /// `listen`); `None`: no metrics port.
    pub metrics_listen: Option<SocketAddr>,
    /// Like `client_names`, for the metrics port (empty: any certificate
    /// from the client CA, as on the gRPC port without `client_names`).
    pub metrics_client_names: Vec<String>,
    /// Where and how to observe; the desired state's sysctls are added to
    /// `extra_sysctls`.
    pub observe: ObserveConfig,
    /// The desired state `Check` uses when a request carries none.
    pub desired: DesiredState,
    /// Handlers a CRI canary may run for (`--allow-canary`): none by
    /// default, since a canary changes the node.
    pub allow_canary: Vec<String>,
    /// At most one canary per handler per this (`--canary-interval`).
    pub canary_interval: Duration,
    /// Keep the Node's condition, labels and annotation
    /// (`--kubeconfig`); `None`: the writer is off.
    pub node_writer: Option<writer::WriterConfig>,
}

/// How the agent stopped after SIGTERM/SIGINT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection finished.
    Drained,
    /// Calls were still in flight when the grace period ended. Nothing
    /// waits for them any more; the process should exit now, since
    /// dropping the runtime would wait for blocking work still running.
    GraceExpired,
}

/// After a signal, in-flight unary calls get this long; then the agent
/// leaves regardless, so SIGTERM never takes over a second.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(800);

/// Why `serve` could not start, or stopped with an error.
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
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the HTTP/2 keepalive {0} must be more than 0")]
    ZeroKeepalive(&'static str),
    #[error("--max-connection-age must be more than 0")]
    ZeroMaxAge,
    #[error(
        "--client-name needs --client-ca: without client certificates there are no names to check"
    )]
    ClientNameWithoutCa,
    #[error("refusing plaintext metrics on {0}: outside loopback the metrics port needs mTLS (--tls-cert, --tls-key, --client-ca) or --insecure-plaintext")]
    MetricsPlaintextOutsideLoopback(SocketAddr),
    #[error("refusing TLS metrics without client certificates on {0}: give --client-ca, or --insecure-plaintext to allow it")]
    MetricsNoClientCa(SocketAddr),
    #[error("--metrics-client-name needs --client-ca: without client certificates there are no names to check")]
    MetricsClientNameWithoutCa,
    #[error("--metrics-client-name needs --metrics-listen")]
    MetricsClientNameWithoutListen,
    #[error("--require-canary {0} needs --allow-canary {0}: the agent runs a canary only for handlers it is allowed to")]
    CanaryNotAllowed(String),
    #[error(transparent)]
    Writer(#[from] writer::WriterError),
    #[error("server failed: {0}")]
    Server(#[from] tonic::transport::Error),
}

/// Checks the listen/TLS combination before anything starts.
pub fn check_security(cfg: &ServeConfig) -> Result<(), ServeError> {
    let has_ca = cfg.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    if !cfg.client_names.is_empty() && !has_ca {
        return Err(ServeError::ClientNameWithoutCa);
    }
    if !cfg.metrics_client_names.is_empty() {
        if !has_ca {
            return Err(ServeError::MetricsClientNameWithoutCa);
        }
        if cfg.metrics_listen.is_none() {
            return Err(ServeError::MetricsClientNameWithoutListen);
        }
    }
    for addr in &cfg.listen {
        if addr.ip().is_loopback() || cfg.insecure_plaintext {
            continue;
        }
        match &cfg.tls {
            None => return Err(ServeError::PlaintextOutsideLoopback(*addr)),
            Some(t) if t.client_ca.is_none() => return Err(ServeError::NoClientCa(*addr)),
            Some(_) => {}
        }
    }
    if let Some(addr) = cfg.metrics_listen {
        if !addr.ip().is_loopback() && !cfg.insecure_plaintext {
            match &cfg.tls {
                None => return Err(ServeError::MetricsPlaintextOutsideLoopback(addr)),
                Some(t) if t.client_ca.is_none() => {
                    return Err(ServeError::MetricsNoClientCa(addr))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Runs the agent until SIGTERM/SIGINT. Never exits the process: when the
/// grace period after the signal ends with calls in flight it returns
/// [`Stopped::GraceExpired`] and leaves the exit to the caller.
pub async fn run(conf: ServeConfig) -> Result<Stopped, ServeError> {
    check_security(&conf)?;
    crate::evaluate::validate(&conf.desired)?;
    if conf.keepalive_interval.is_zero() {
        return Err(ServeError::ZeroKeepalive("interval"));
    }
    if conf.keepalive_timeout.is_zero() {
        return Err(ServeError::ZeroKeepalive("timeout"));
    }
    if conf.max_connection_age.is_zero() {
        return Err(ServeError::ZeroMaxAge);
    }
    if let Some(h) = conf
        .desired
        .require_canary
        .iter()
        .find(|h| !conf.allow_canary.contains(h))
    {
        return Err(ServeError::CanaryNotAllowed(h.clone()));
    }
    if let Some(w) = &conf.node_writer {
        writer::precheck(w, &conf.desired)?;
    }
    let desired = conf.desired.clone();
    let nofile = raise_fd_limit();
    let configured = Limits {
        max_connections: conf.max_connections,
        max_connections_per_address: conf.max_connections_per_address,
        max_watchers: conf.max_watchers,
        max_handshakes: MAX_HANDSHAKES,
        max_handshakes_per_address: MAX_HANDSHAKES_PER_ADDRESS,
    };
    let limits = nofile.map_or(configured, |n| size_limits(n, configured));
    info!(
        open_files = nofile,
        reserved_for_observation = FD_RESERVE,
        max_connections = limits.max_connections,
        max_connections_configured = configured.max_connections,
        max_connections_per_address = limits.max_connections_per_address,
        max_connections_per_address_configured = configured.max_connections_per_address,
        max_watchers = limits.max_watchers,
        max_watchers_configured = configured.max_watchers,
        max_handshakes = limits.max_handshakes,
        max_handshakes_configured = configured.max_handshakes,
        "connection limits"
    );
    let tls = match &conf.tls {
        Some(paths) => Some(ServerTls::load_for_clients(
            paths.clone(),
            conf.client_names.clone(),
        )?),
        None => None,
    };
    let metrics_tls = match (&conf.tls, conf.metrics_listen) {
        (Some(paths), Some(_)) => Some(ServerTls::load_for_scrapers(
            paths.clone(),
            conf.metrics_client_names.clone(),
        )?),
        _ => None,
    };
    let mut listeners = Vec::new();
    for addr in &conf.listen {
        let l = bind_or_fall_back(*addr)?;
        match l.local_addr() {
            Ok(bound) => info!(addr = %bound, "listening"),
            Err(e) => warn!(addr = %addr, "listening, but the bound address is unknown: {e}"),
        }
        listeners.push(l);
    }
    let metrics_listener = match conf.metrics_listen {
        Some(addr) => {
            let l = bind_or_fall_back(addr)?;
            match l.local_addr() {
                Ok(bound) => info!(addr = %bound, "metrics listening"),
                Err(e) => {
                    warn!(addr = %addr, "metrics listening, but the bound address is unknown: {e}")
                }
            }
            Some(l)
        }
        None => None,
    };
    let mut cfg = conf.observe.clone();
    cfg.extra_sysctls
        .extend(desired.sysctls.iter().map(|s| s.name.clone()));
    cfg.require_runtime_root |= !desired.require_pod_userns.is_empty();
    info!(
        listen = ?conf.listen,
        tls = tls.is_some(),
        client_ca = conf.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        client_names = ?conf.client_names,
        metrics_listen = ?conf.metrics_listen,
        metrics_client_names = ?conf.metrics_client_names,
        max_connection_age = %humantime::format_duration(conf.max_connection_age),
        poll_interval = %humantime::format_duration(conf.poll_interval),
        probe_interval = %humantime::format_duration(conf.probe_interval),
        min_refresh_interval = %humantime::format_duration(conf.min_refresh_interval),
        cri_endpoint = %cfg.gvisor.cri_endpoint,
        runsc = %cfg.gvisor.runsc_path.display(),
        defaults = ?desired,
        allow_canary = ?conf.allow_canary,
        canary_interval = %humantime::format_duration(conf.canary_interval),
        version = crate::observe::node::AGENT_VERSION,
        "starting"
    );
    let outside = |a: &SocketAddr| !a.ip().is_loopback();
    if conf.insecure_plaintext
        && (conf.listen.iter().any(outside) || conf.metrics_listen.iter().any(outside))
    {
        warn!("--insecure-plaintext: serving without mTLS outside loopback; anyone who reaches the port can read this node's report");
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let timing = state::Timing {
        poll: conf.poll_interval,
        probe: conf.probe_interval,
        min_refresh: conf.min_refresh_interval,
        min_sandbox: conf.min_sandbox_interval,
        canary_interval: conf.canary_interval,
        canary_schedule: desired.require_canary.clone(),
        canary_sweep: !conf.allow_canary.is_empty(),
    };
    let (state, _owner) = state::start(cfg, timing, shutdown_rx.clone()).await;
    tokio::spawn(shed_start_up_pages(shutdown_rx.clone()));
    let svc = service::Service::new(
        state.clone(),
        desired.clone(),
        limits.max_watchers,
        conf.heartbeat,
        shutdown_rx.clone(),
    )
    .allow_canaries(conf.allow_canary.clone());
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let writer_stats = conf
        .node_writer
        .as_ref()
        .map(|_| Arc::new(writer::Stats::default()));
    if let (Some(mut w), Some(stats)) = (conf.node_writer.clone(), writer_stats.clone()) {
        // What the node is judged against, in the desired-state library's
        // form, so the readiness gate can compare it with its pool's.
        w.desired_annotation = Some(crate::desired::to_annotation(&desired)?);
        tokio::spawn(writer::run(w, svc.clone(), stats, shutdown_rx.clone()));
    }
    // Ends with the runtime; the reloader with this handle.
    let _metrics_reloader = match &metrics_tls {
        Some(t) => Some(t.spawn_reloader(ReloadOptions::default())?),
        None => None,
    };
    if let Some(l) = metrics_listener {
        let scrape = metrics::Scrape {
            state: state.clone(),
            service: svc.clone(),
            defaults: Arc::new(desired),
            grpc_slots: slots.clone(),
            grpc_max_connections: limits.max_connections,
            node_writer: writer_stats.clone(),
        };
        tokio::spawn(metrics::serve(l, metrics_tls, scrape));
    }

    // Every service decodes at most MAX_REQUEST_BYTES, not tonic's 4 MiB.
    let (health, health_svc) = tonic_health::server::health_reporter();
    let health_svc = health_svc.max_decoding_message_size(MAX_REQUEST_BYTES);
    health
        .set_serving::<ReadinessServiceServer<service::Service>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?
        .max_decoding_message_size(MAX_REQUEST_BYTES);

    let router = Server::builder()
        .max_concurrent_streams(Some(128))
        .concurrency_limit_per_connection(256)
        .http2_keepalive_interval(Some(conf.keepalive_interval))
        .http2_keepalive_timeout(Some(conf.keepalive_timeout))
        .tcp_keepalive(Some(Duration::from_secs(60)))
        // GOAWAY at the age; listen::Counted closes the socket after the
        // grace (tonic's own grace timer would skip the GOAWAY).
        .max_connection_age(conf.max_connection_age)
        .timeout(conf.request_timeout)
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            conf.max_concurrent_requests,
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

    // Watch streams end on the signal; in-flight unary calls get the grace
    // period, then `run` returns without them.
    let shutdown = async move {
        wait_for_signal().await;
        info!("stopping");
        let _ = shutdown_tx.send(true);
    };
    let mut signalled = shutdown_rx.clone();
    let grace = async move {
        if signalled.wait_for(|stop| *stop).await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } else {
            // The sender went without a signal: only the server can end.
            std::future::pending::<()>().await;
        }
    };
    let per_address = crate::tls::PerAddress::new(limits.max_connections_per_address);
    let max_age = Some(listen::MaxAge {
        age: conf.max_connection_age,
        grace: MAX_AGE_GRACE,
    });
    // Both transports feed one connection type, so one server runs either way.
    let (_reloader, connections) = match tls {
        Some(tls) => {
            let reloader = tls.spawn_reloader(ReloadOptions::default())?;
            let accept = AcceptLimits {
                max_handshakes: limits.max_handshakes,
                max_handshakes_per_ip: limits.max_handshakes_per_address,
                ..AcceptLimits::default()
            };
            let streams = listeners
                .into_iter()
                .map(|l| tls::incoming(l, tls.clone(), accept.clone()))
                .collect();
            (
                Some(reloader),
                listen::merge(streams, slots, per_address, max_age),
            )
        }
        None => {
            // A socket waiting for its preface holds a connection slot
            // already: it costs a descriptor as much as a served one.
            let streams = listeners
                .into_iter()
                .map(|l| {
                    listen::plaintext(
                        l,
                        Duration::from_secs(10),
                        slots.clone(),
                        per_address.clone(),
                    )
                })
                .collect();
            (None, listen::merge(streams, slots, per_address, max_age))
        }
    };
    let serve = router.serve_with_incoming_shutdown(connections, shutdown);
    tokio::select! {
        served = serve => {
            served?;
            Ok(Stopped::Drained)
        }
        () = grace => Ok(Stopped::GraceExpired),
    }
}

/// How long after the first observation the start-up pages are shed: the
/// servers, the Node writer's first write and the first poll have run by
/// then (measured: 2 s is past all of them on an idle 2-core machine).
const SHED_AFTER: Duration = Duration::from_secs(2);

/// Drops the binary's start-up pages from memory once (residency.rs): most
/// of its text and read-only data is resident only because start-up
/// faulted it in with the pages around each fault. `MADV_RANDOM` first, so
/// the pages the agent then uses come back one at a time instead of with
/// readahead; then `MADV_PAGEOUT`. Measured on the x86_64 node build
/// (docs/developer/binary.md, "Memory"): idle VmRSS 3,844 kB -> 2,796 kB.
/// Advice is a hint: failing (a kernel before 5.4 has no MADV_PAGEOUT) is
/// logged and changes nothing else.
async fn shed_start_up_pages(mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        () = tokio::time::sleep(SHED_AFTER) => {}
        _ = shutdown.wait_for(|stop| *stop) => return,
    }
    let shed = crate::residency::advise_own_image(crate::residency::Advice::Random)
        .and_then(|_| crate::residency::advise_own_image(crate::residency::Advice::Pageout));
    match shed {
        Ok(bytes) => info!(bytes, "start-up pages of the binary paged out"),
        Err(e) => warn!("the binary's start-up pages stay resident: {e}"),
    }
}

/// Binds `addr`; the IPv6 wildcard falls back to the IPv4 one on a node
/// booted with `ipv6.disable=1`, where no IPv6 socket can be made.
fn bind_or_fall_back(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    match bind(addr) {
        Ok(l) => Ok(l),
        Err(e) => match ipv4_fallback(addr, &e) {
            Some(v4) => {
                warn!(
                    "cannot listen on {addr} ({e}): IPv6 is disabled on this node; listening on {v4} instead"
                );
                bind(v4).map_err(|source| ServeError::Bind { addr: v4, source })
            }
            None => Err(ServeError::Bind { addr, source: e }),
        },
    }
}

/// Where to listen instead of `addr` after `err`: the IPv4 wildcard on the
/// same port, only for the IPv6 wildcard and only when the error says IPv6
/// is unavailable (EAFNOSUPPORT from socket(2) with `ipv6.disable=1`,
/// EADDRNOTAVAIL from bind(2)). Any other address or error stays an error:
/// the operator asked for exactly that address. Pure.
pub fn ipv4_fallback(addr: SocketAddr, err: &std::io::Error) -> Option<SocketAddr> {
    let wildcard_v6 = matches!(addr, SocketAddr::V6(a) if a.ip().is_unspecified());
    let v6_unavailable = matches!(
        err.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
    );
    (wildcard_v6 && v6_unavailable)
        .then(|| SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port())))
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

/// TLS handshakes in flight at most, in total and per address (an IPv4
/// address or an IPv6 /64), before sizing to the open-file limit. 64
/// addresses are needed to fill the total, and even then a newcomer takes
/// the place of the oldest handshake still waiting for its ClientHello.
pub const MAX_HANDSHAKES: usize = 1024;
pub const MAX_HANDSHAKES_PER_ADDRESS: usize = 16;

/// How long a connection past its maximum age may finish what it is doing
/// (unary calls have `--request-timeout`, 30 s by default) before it is
/// closed.
pub const MAX_AGE_GRACE: Duration = Duration::from_secs(30);

/// Descriptors never given to connections: the probe helper's and runsc's
/// pipes, CRI connections, /proc and /sys reads, drop-in files, the
/// listeners, the TLS files and the runtime's own.
pub const FD_RESERVE: u64 = 128;

/// The open-file limit the agent raises its hard limit to where it may
/// (CAP_SYS_RESOURCE), never above `fs.nr_open`.
pub const WANTED_NOFILE: u64 = 65_536;

/// The connection limits that depend on descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    pub max_watchers: usize,
    pub max_handshakes: usize,
    pub max_handshakes_per_address: usize,
}

/// Fits `configured` into `nofile` descriptors, keeping [`FD_RESERVE`] for
/// observation: a quarter of the rest for sockets in their TLS handshake,
/// the others for connections (plaintext ones from accept on). Where that
/// lowered a total, one address gets at most an eighth of it, so a handful
/// of addresses cannot fill the agent (a per-address cap of 0, none, stays).
/// A watcher holds a connection. Only ever lowers a limit (never to 0).
/// Pure.
pub fn size_limits(nofile: u64, configured: Limits) -> Limits {
    let budget = usize::try_from(nofile.saturating_sub(FD_RESERVE))
        .unwrap_or(usize::MAX)
        .max(8);
    let max_handshakes = configured.max_handshakes.min(budget / 4).max(1);
    let max_connections = configured.max_connections.min(budget - budget / 4).max(1);
    // Where the descriptors lowered a total, one address gets at most an
    // eighth of it; a total the operator set, and 0 (no cap), are left as
    // the operator set them.
    let cap_per_address = |per_address: usize, total: usize, wanted: usize| match per_address {
        0 => 0,
        c if total == wanted => c,
        c => c.min((total / 8).max(1)),
    };
    Limits {
        max_connections,
        max_connections_per_address: cap_per_address(
            configured.max_connections_per_address,
            max_connections,
            configured.max_connections,
        ),
        max_watchers: configured.max_watchers.min(max_connections).max(1),
        max_handshakes,
        max_handshakes_per_address: cap_per_address(
            configured.max_handshakes_per_address,
            max_handshakes,
            configured.max_handshakes,
        ),
    }
}

/// The hard limit to ask for: [`WANTED_NOFILE`] (at most `nr_open`) when the
/// current hard limit is lower, else the current one. Pure.
pub fn nofile_target(hard: u64, nr_open: Option<u64>) -> u64 {
    let wanted = nr_open.map_or(WANTED_NOFILE, |n| WANTED_NOFILE.min(n));
    hard.max(wanted)
}

/// Raises the open-file limit as far as the agent may: the hard limit to
/// [`nofile_target`] where CAP_SYS_RESOURCE allows, else the soft limit to
/// the hard one. Returns the soft limit in force afterwards (`None` when it
/// cannot be read).
fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let nr_open = crate::hostio::read_value(std::path::Path::new("/proc/sys/fs/nr_open"), 64)
        .ok()
        .and_then(|v| v.trim().parse().ok());
    let target = nofile_target(hard, nr_open);
    if target > hard {
        match setrlimit(Resource::RLIMIT_NOFILE, target, target) {
            Ok(()) => info!("raised the open-file limit from {soft}:{hard} to {target}:{target}"),
            // EPERM without CAP_SYS_RESOURCE: the soft limit still rises.
            Err(e) => info!("cannot raise the open-file hard limit from {hard} to {target} ({e}); raising only the soft limit"),
        }
    }
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
            }
        }
    }
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Error;

    const DEFAULTS: Limits = Limits {
        max_connections: 16_384,
        max_connections_per_address: 256,
        max_watchers: 4096,
        max_handshakes: MAX_HANDSHAKES,
        max_handshakes_per_address: MAX_HANDSHAKES_PER_ADDRESS,
    };

    #[test]
    fn limits_fit_1024_descriptors_with_a_reserve() {
        let l = size_limits(1024, DEFAULTS);
        let fds_for_sockets = l.max_connections + l.max_handshakes;
        assert!(
            fds_for_sockets as u64 + FD_RESERVE <= 1024,
            "{l:?} leaves no reserve"
        );
        assert_eq!(l.max_handshakes, 224);
        assert_eq!(l.max_connections, 672);
        assert_eq!(l.max_watchers, 672);
        // A handful of addresses cannot fill it.
        assert_eq!(l.max_connections_per_address, 84);
        assert!(l.max_connections_per_address * 4 < l.max_connections);
        assert_eq!(l.max_handshakes_per_address, 16);
    }

    #[test]
    fn a_generous_limit_keeps_the_configured_values() {
        assert_eq!(size_limits(65_536, DEFAULTS), DEFAULTS);
        assert_eq!(size_limits(1 << 20, DEFAULTS), DEFAULTS);
        // Sizing never raises a configured value.
        let small = Limits {
            max_connections: 10,
            max_connections_per_address: 0,
            max_watchers: 5,
            max_handshakes: 16,
            max_handshakes_per_address: 2,
        };
        assert_eq!(size_limits(1024, small), small);
        // A total the operator set below the budget keeps its per-address
        // cap as set (no eighth of it).
        let set = Limits {
            max_connections: 50,
            ..DEFAULTS
        };
        assert_eq!(size_limits(1024, set).max_connections_per_address, 256);
    }

    #[test]
    fn a_tiny_limit_still_serves() {
        let l = size_limits(16, DEFAULTS);
        assert!(l.max_connections >= 1 && l.max_handshakes >= 1 && l.max_watchers >= 1);
        assert!(l.max_connections_per_address >= 1);
    }

    #[test]
    fn the_hard_limit_target_respects_nr_open() {
        assert_eq!(nofile_target(1024, Some(1_048_576)), WANTED_NOFILE);
        assert_eq!(nofile_target(1024, Some(4096)), 4096);
        assert_eq!(nofile_target(1024, None), WANTED_NOFILE);
        // Never lowers what is already there.
        assert_eq!(nofile_target(1_048_576, Some(1_048_576)), 1_048_576);
    }

    #[test]
    fn only_the_ipv6_wildcard_falls_back_and_only_when_ipv6_is_unavailable() {
        let wildcard: SocketAddr = "[::]:10150".parse().unwrap_or_else(|_| unreachable!());
        let v4: SocketAddr = "0.0.0.0:10150".parse().unwrap_or_else(|_| unreachable!());
        let no_family = Error::from_raw_os_error(libc::EAFNOSUPPORT);
        let no_addr = Error::from_raw_os_error(libc::EADDRNOTAVAIL);
        let in_use = Error::from_raw_os_error(libc::EADDRINUSE);
        assert_eq!(ipv4_fallback(wildcard, &no_family), Some(v4));
        assert_eq!(ipv4_fallback(wildcard, &no_addr), Some(v4));
        // Another reason to fail is not about IPv6.
        assert_eq!(ipv4_fallback(wildcard, &in_use), None);
        // An address the operator named is kept, whatever the error.
        for other in [
            "[::1]:10150",
            "[fd00::1]:10150",
            "0.0.0.0:10150",
            "127.0.0.1:10150",
        ] {
            let a: SocketAddr = other.parse().unwrap_or_else(|_| unreachable!());
            assert_eq!(ipv4_fallback(a, &no_family), None, "{other}");
        }
    }
}
