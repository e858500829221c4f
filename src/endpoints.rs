//! The workspace's one small HTTP/1.1 server, for read-only endpoints
//! whose answer depends on the path alone: the agent's metrics port and
//! the controller's `/healthz`, `/readyz` and `/metrics`. GET and HEAD
//! only (anything else is 405 with `Allow`); plaintext or TLS; bounded, so
//! a scraper or a port scan never holds the process: connection slots
//! overall and per address, a deadline for a request's head, a maximum
//! connection age, hyper's smallest buffers.
//!
//! The answer ([`respond`]) is pure; [`serve_plain`] and [`serve_tls`] are
//! the I/O around it.

use std::{convert::Infallible, net::IpAddr, sync::Arc, time::Duration};

pub use hyper::StatusCode;
use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response,
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
    metrics::text::CONTENT_TYPE as METRICS_CONTENT_TYPE,
    tls::{self, AcceptLimits, AddressSlot, PerAddress, ServerTls},
};

const TEXT: &str = "text/plain; charset=utf-8";

/// What an endpoint answers: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: String,
}

impl Answer {
    /// A line of plain text (a newline is added).
    pub fn text(status: StatusCode, line: &str) -> Self {
        Self {
            status,
            content_type: TEXT,
            body: format!("{line}\n"),
        }
    }

    /// Prometheus text exposition, 200.
    pub fn metrics(body: String) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: METRICS_CONTENT_TYPE,
            body,
        }
    }
}

/// How much of the process one listener may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once, over all peers.
    pub max_connections: usize,
    /// Connections held at once from one IPv4 address or IPv6 /64; 0 = no
    /// cap.
    pub max_per_address: usize,
    /// A request's head must arrive within this.
    pub header_read_timeout: Duration,
    /// A connection is closed at this age, whatever it does (scrapers and
    /// probes reconnect): nothing holds a slot forever.
    pub max_connection_age: Duration,
    /// TLS handshakes in flight at once, overall and per address.
    pub max_handshakes: usize,
    pub max_handshakes_per_address: usize,
}

impl Default for Limits {
    /// A few Prometheus servers and kubelet probes, each keeping one
    /// connection open.
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_per_address: 8,
            header_read_timeout: Duration::from_secs(5),
            max_connection_age: Duration::from_secs(600),
            max_handshakes: 16,
            max_handshakes_per_address: 4,
        }
    }
}

/// The response to `method` on `path`, given the endpoints' `answer`
/// (called for GET and HEAD only; HEAD gets its headers without the body).
pub fn respond(
    method: &Method,
    path: &str,
    answer: impl FnOnce(&str) -> Answer,
) -> Response<String> {
    let head = method == Method::HEAD;
    let a = if method == Method::GET || head {
        answer(path)
    } else {
        Answer::text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: GET and HEAD only",
        )
    };
    let mut r = Response::new(if head { String::new() } else { a.body });
    *r.status_mut() = a.status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(a.content_type),
    );
    if a.status == StatusCode::METHOD_NOT_ALLOWED {
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
    }
    r
}

/// The connection slots of one listener: overall and per address.
struct Slots {
    all: Arc<Semaphore>,
    per_address: PerAddress,
}

impl Slots {
    fn new(limits: &Limits) -> Self {
        Self {
            all: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            per_address: PerAddress::new(limits.max_per_address),
        }
    }

    /// Both slots for a connection from `ip`, or `None` when either is
    /// full.
    fn take(&self, ip: IpAddr) -> Option<Held> {
        let address = self.per_address.take(ip)?;
        let slot = self.all.clone().try_acquire_owned().ok()?;
        Some((slot, address))
    }
}

type Held = (OwnedSemaphorePermit, Option<AddressSlot>);

/// Serves `listener`, plaintext, until the task is dropped. (Apart from
/// [`serve_tls`] so a binary that serves plaintext only, the controller,
/// links no TLS server.)
pub async fn serve_plain<F>(listener: TcpListener, limits: Limits, answer: F)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let slots = Slots::new(&limits);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                debug!("endpoint accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(held) = slots.take(peer.ip()) else {
            let _ = stream.set_zero_linger();
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, answer.clone(), limits, held));
    }
}

/// Serves `listener` with `tls` (its ALPN offering HTTP/1.1) until the
/// task is dropped.
pub async fn serve_tls<F>(listener: TcpListener, tls: ServerTls, limits: Limits, answer: F)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let slots = Slots::new(&limits);
    let accept = AcceptLimits {
        max_handshakes: limits.max_handshakes.max(1),
        max_handshakes_per_ip: limits.max_handshakes_per_address,
        ..AcceptLimits::default()
    };
    let mut incoming = tls::incoming(listener, tls, accept);
    while let Some(conn) = incoming.next().await {
        let Ok(conn) = conn else { continue };
        let Ok(peer) = conn.get_ref().0.peer_addr() else {
            continue;
        };
        let Some(held) = slots.take(peer.ip()) else {
            debug!(%peer, "endpoint connection limit reached; closing a new connection");
            continue;
        };
        tokio::spawn(connection(conn, answer.clone(), limits, held));
    }
}

/// One connection, holding its slots until it ends.
async fn connection<IO, F>(io: IO, answer: Arc<F>, limits: Limits, held: Held)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let r = respond(req.method(), req.uri().path(), |p| answer(p));
        async move { Ok::<_, Infallible>(r) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // hyper's smallest buffer: these requests are a few hundred bytes.
        .max_buf_size(8192)
        .max_headers(32)
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = tokio::time::timeout(limits.max_connection_age, conn)
        .await
        .unwrap_or(Ok(()))
    {
        debug!("endpoint connection ended: {e}");
    }
    drop(held);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(path: &str) -> Answer {
        match path {
            "/x" => Answer::text(StatusCode::OK, "x"),
            _ => Answer::text(StatusCode::NOT_FOUND, "not found"),
        }
    }

    #[test]
    fn get_answers_head_has_no_body_others_are_405() {
        let r = respond(&Method::GET, "/x", hello);
        assert_eq!((r.status(), r.body().as_str()), (StatusCode::OK, "x\n"));
        assert_eq!(r.headers()[header::CONTENT_TYPE], TEXT);

        let r = respond(&Method::HEAD, "/x", hello);
        assert_eq!((r.status(), r.body().as_str()), (StatusCode::OK, ""));
        assert_eq!(r.headers()[header::CONTENT_TYPE], TEXT);

        let r = respond(&Method::GET, "/y", hello);
        assert_eq!(r.status(), StatusCode::NOT_FOUND);

        for m in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
            let r = respond(&m, "/x", |_| panic!("{m} reached the endpoints"));
            assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{m}");
            assert_eq!(r.headers()[header::ALLOW], "GET, HEAD", "{m}");
        }
    }

    #[test]
    fn metrics_answers_carry_the_exposition_type() {
        let a = Answer::metrics("x 1\n".into());
        assert_eq!(a.content_type, METRICS_CONTENT_TYPE);
        assert_eq!(a.status, StatusCode::OK);
    }
}
