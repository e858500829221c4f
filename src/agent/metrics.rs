//! The metrics port (`serve --metrics-listen`): HTTP/1.1, `GET /metrics`
//! only, the text [`crate::metrics::render`] makes of the report the owner
//! published last. A scrape reads; it never asks for an observation.
//!
//! Same transport policy as the gRPC port (checked in
//! [`super::check_security`]), its own TLS configuration (HTTP/1.1 ALPN, the
//! `--metrics-client-name` names), and its own small connection caps, so
//! scrapers and gRPC clients never take each other's slots.

use std::{convert::Infallible, net::IpAddr, sync::Arc, time::Duration};

use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response,
    StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_stream::StreamExt;
use tracing::debug;

use crate::{
    agent::{listen::PerAddress, service::Service, state::State},
    metrics::{render, text::CONTENT_TYPE},
    proto::v1::DesiredState,
    tls::{self, AcceptLimits, ServerTls},
};

/// Connections held at once on the metrics port: a few Prometheus
/// servers, each keeping one open.
const MAX_CONNECTIONS: usize = 64;
const MAX_CONNECTIONS_PER_ADDRESS: usize = 8;
/// A request's head must arrive within this.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed at this age, whatever it does (scrapers
/// reconnect): nothing holds a slot forever.
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);

/// What a scrape reads.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub state: State,
    pub service: Service,
    pub defaults: Arc<DesiredState>,
    /// The gRPC connection slots and their number: held = number − free.
    pub grpc_slots: Arc<Semaphore>,
    pub grpc_max_connections: usize,
    /// The Node writer's counters, when it runs.
    pub node_writer: Option<Arc<super::writer::Stats>>,
}

impl Scrape {
    fn text(&self) -> String {
        let report = self.state.latest();
        let mut stats = self.state.stats();
        stats.watchers = self.service.watchers_open() as u64;
        stats.connections = self
            .grpc_max_connections
            .saturating_sub(self.grpc_slots.available_permits()) as u64;
        stats.node_writer = self.node_writer.as_ref().map(|w| w.snapshot());
        render(&report, &self.defaults, &stats)
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<String> {
        let plain = |status: StatusCode, body: &str| {
            let mut r = Response::new(format!("{body}\n"));
            *r.status_mut() = status;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        };
        if req.uri().path() != "/metrics" {
            return plain(StatusCode::NOT_FOUND, "not found: only /metrics is served");
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            r.headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let mut r = Response::new(self.text());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(CONTENT_TYPE),
        );
        r
    }
}

/// Serves `listener` until the task is dropped: plaintext, or TLS with
/// `tls` (built by [`ServerTls::load_for_scrapers`]).
pub async fn serve(listener: TcpListener, tls: Option<ServerTls>, scrape: Scrape) {
    let scrape = Arc::new(scrape);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_address = PerAddress::new(MAX_CONNECTIONS_PER_ADDRESS);
    let take = move |ip: IpAddr| {
        let address = per_address.take(ip)?;
        let slot = slots.clone().try_acquire_owned().ok()?;
        Some((slot, address))
    };
    match tls {
        Some(tls) => {
            let limits = AcceptLimits {
                max_handshakes: 16,
                max_handshakes_per_ip: 4,
                ..AcceptLimits::default()
            };
            let mut incoming = tls::incoming(listener, tls, limits);
            while let Some(conn) = incoming.next().await {
                let Ok(conn) = conn else { continue };
                let Ok(peer) = conn.get_ref().0.peer_addr() else {
                    continue;
                };
                let Some(held) = take(peer.ip()) else {
                    debug!(%peer, "metrics connection limit reached; closing a new connection");
                    continue;
                };
                tokio::spawn(connection(conn, scrape.clone(), held));
            }
        }
        None => loop {
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    debug!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(held) = take(peer.ip()) else {
                let _ = stream.set_zero_linger();
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(stream, scrape.clone(), held));
        },
    }
}

/// One connection, holding its slots until it ends.
async fn connection<IO>(io: IO, scrape: Arc<Scrape>, held: (OwnedSemaphorePermit, impl Send))
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let r = scrape.respond(&req);
        async move { Ok::<_, Infallible>(r) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // hyper's smallest buffer: a scrape's request is a few hundred bytes.
        .max_buf_size(8192)
        .max_headers(32)
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = tokio::time::timeout(MAX_CONNECTION_AGE, conn)
        .await
        .unwrap_or(Ok(()))
    {
        debug!("metrics connection ended: {e}");
    }
    drop(held);
}
