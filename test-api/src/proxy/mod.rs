//! The fault proxy: a loopback proxy in front of a real kube-apiserver (a
//! cluster of `scripts/control-plane.sh up DIR`) for what the real server
//! will not do on demand.
//!
//! HTTP mode ([`FaultProxy::http`]) terminates TLS with a serving
//! certificate of its own CA, authenticates a caller by its client
//! certificate (verified against the cluster's client CA, CN = user, O =
//! groups) and forwards to the real server presenting the front-proxy
//! client certificate with `X-Remote-User`/`X-Remote-Group` (and the
//! credential id as `X-Remote-Extra-…`), so the real Node authorizer, RBAC
//! and NodeRestriction decide with the caller's identity; a bearer token is
//! passed through unchanged. Requests and answers (watches, chunked lists)
//! are streamed. Faults: scripted answers, a hang, slow heads and bodies,
//! resets, connection refused (down/up on the same port), rewritten answers
//! (hostile content), and certificates refused by serial.
//!
//! TCP mode ([`FaultProxy::tcp`]) passes bytes through untouched (the
//! client talks TLS with the real server) for faults at the TCP level:
//! resets, hangs, refused connections.
//!
//! Both record each request they see (HTTP mode: method, path, status,
//! user) for tests that assert on what was asked.

pub mod faults;
pub mod tls;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::kubeconfig;
pub use faults::{status_body, Faults, Scripted};
use faults::{FaultState, RewriteFn};
use tls::{ClientCa, Peer, Serving};
pub use tls::{ClientCert, TlsError};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{0}")]
    Tls(#[from] TlsError),
    #[error("listening on 127.0.0.1: {0}")]
    Io(#[from] std::io::Error),
    #[error("no APISERVER_PORT in {0}/control-plane.env (not a control-plane.sh cluster?)")]
    NoCluster(String),
    #[error("the proxy's runtime: {0}")]
    Runtime(String),
}

/// One request as the proxy saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// The request's arrival number, taken as the proxy's handler starts,
    /// before anything is awaited: the record itself is made only once the
    /// server (or the script) has answered, so the log's order is the order
    /// of answers, and a request admitted before [`FaultProxy::clear_requests`]
    /// may be answered after it. Readers order and window by this number.
    pub arrival: u64,
    pub method: String,
    pub path: String,
    pub query: String,
    /// The client certificate's CN (None for a bearer token, which the
    /// proxy passes on without reading, and for anonymous requests).
    pub user: Option<String>,
    /// `X509SHA256=<hex>` for a certificate (as the audit log names it),
    /// `token:<hash>` (see [`token_credential`]) for a bearer token.
    pub credential: Option<String>,
    /// The answer's status (the real server's or the scripted one; 0 for a
    /// reset).
    pub status: u16,
}

/// The credential id a request with bearer `token` is recorded under: a
/// hash, so the log does not hold the token.
pub fn token_credential(token: &str) -> String {
    let sum = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let hex: String = sum.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("token:{hex}")
}

pub(crate) fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Http,
    Tcp,
}

pub(crate) struct Inner {
    mode: Mode,
    port: u16,
    upstream: SocketAddr,
    serving_ca: Option<String>,
    cluster_ca: String,
    server_tls: Option<Arc<rustls::ServerConfig>>,
    upstream_tls: Arc<rustls::ClientConfig>,
    client_ca: ClientCa,
    revoked: Mutex<HashSet<Vec<u8>>>,
    faults: Arc<FaultState>,
    log: Mutex<Vec<RequestRecord>>,
    /// The next arrival number ([`RequestRecord::arrival`]).
    arrivals: std::sync::atomic::AtomicU64,
    /// Arrival numbers of the requests not answered yet.
    pending: Mutex<std::collections::BTreeSet<u64>>,
    /// Requests that arrived before this number are out of the reader's
    /// window ([`FaultProxy::clear_requests`]).
    window: std::sync::atomic::AtomicU64,
    accept: Mutex<Option<JoinHandle<()>>>,
    /// Bumped to drop every open connection; the bool says with a reset.
    conn_gen: watch::Sender<(u64, bool)>,
    open: watch::Sender<usize>,
    rt: tokio::runtime::Handle,
}

fn bind(port: u16) -> std::io::Result<TcpListener> {
    let sock = TcpSocket::new_v4()?;
    sock.set_reuseaddr(true)?;
    sock.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    sock.listen(1024)
}

impl Inner {
    pub(crate) fn drop_connections(&self, reset: bool) {
        self.conn_gen.send_modify(|g| *g = (g.0 + 1, reset));
    }

    pub(crate) fn stop_listening(&self) {
        if let Some(h) = guard(&self.accept).take() {
            h.abort();
        }
        self.drop_connections(false);
        // The listening socket closes once the aborted task is dropped, and
        // the connections once their tasks saw the generation change.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let listening = std::net::TcpStream::connect_timeout(
                &SocketAddr::from(([127, 0, 0, 1], self.port)),
                Duration::from_millis(200),
            )
            .is_ok();
            if !listening && *self.open.borrow() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn listen(self: &Arc<Self>) -> std::io::Result<()> {
        let mut accept = guard(&self.accept);
        if accept.is_some() {
            return Ok(());
        }
        let listener = {
            let _enter = self.rt.enter();
            bind(self.port)?
        };
        *accept = Some(self.rt.spawn(accept_loop(Arc::clone(self), listener)));
        Ok(())
    }

    fn record(&self, r: RequestRecord) {
        guard(&self.log).push(r);
    }
}

/// A request the proxy has not answered yet, by its arrival number: in
/// `Inner::pending` from the handler's start to its end (the answer's head,
/// scripted or the server's, or a reset).
struct Pending(Arc<Inner>, u64);

impl Pending {
    fn new(inner: &Arc<Inner>, arrival: u64) -> Pending {
        guard(&inner.pending).insert(arrival);
        Pending(Arc::clone(inner), arrival)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        guard(&self.0.pending).remove(&self.1);
    }
}

/// Counts a connection as open until its task ends.
struct OpenConn(Arc<Inner>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    loop {
        let sock = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // EMFILE and friends: back off rather than spin.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let mut gen = inner.conn_gen.subscribe();
        inner.open.send_modify(|n| *n += 1);
        let open = OpenConn(Arc::clone(&inner));
        let conn_inner = Arc::clone(&inner);
        let reset = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sock = Resettable {
            inner: sock,
            reset: Arc::clone(&reset),
        };
        tokio::spawn(async move {
            let serve = async {
                match conn_inner.mode {
                    Mode::Http => serve_http(Arc::clone(&conn_inner), sock).await,
                    Mode::Tcp => serve_tcp(Arc::clone(&conn_inner), sock).await,
                }
            };
            // The reset flag is set before the select drops the socket.
            let dropped = async {
                let _ = gen.changed().await;
                if gen.borrow().1 {
                    reset.store(true, Ordering::SeqCst);
                }
            };
            tokio::select! {
                biased;
                _ = dropped => {}
                _ = serve => {}
            }
            drop(open);
        });
    }
}

/// A TCP stream that, once told to, closes with a reset (SO_LINGER 0)
/// instead of a FIN when dropped.
struct Resettable {
    inner: TcpStream,
    reset: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// ------------------------------------------------------------------ TCP mode

async fn serve_tcp(inner: Arc<Inner>, down: Resettable) {
    if inner.faults.take_reset() {
        down.reset.store(true, Ordering::SeqCst);
        return;
    }
    inner.faults.wait_unhung().await;
    let Ok(mut up) = TcpStream::connect(inner.upstream).await else {
        // The real server is down: the client sees its connection dropped.
        return;
    };
    let _ = up.set_nodelay(true);
    let (mut dr, mut dw) = tokio::io::split(down);
    let (mut ur, mut uw) = up.split();
    {
        let to_up = copy_unless_hung(&inner.faults, &mut dr, &mut uw);
        let to_down = copy_unless_hung(&inner.faults, &mut ur, &mut dw);
        tokio::select! {
            _ = to_up => {}
            _ = to_down => {}
        }
    }
    let _ = dw.shutdown().await;
}

/// Copies until EOF or an error; while the proxy is hung, bytes read are
/// held back (the TCP connection stays open, nothing arrives).
async fn copy_unless_hung<R, W>(faults: &FaultState, r: &mut R, w: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        faults.wait_unhung().await;
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

// ----------------------------------------------------------------- HTTP mode

async fn serve_http(inner: Arc<Inner>, sock: Resettable) {
    inner.faults.wait_unhung().await;
    let Some(server_tls) = inner.server_tls.clone() else {
        return;
    };
    let reset = Arc::clone(&sock.reset);
    let acceptor = tokio_rustls::TlsAcceptor::from(server_tls);
    let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock)).await
    else {
        return;
    };
    let peer = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|der| tls::peer(der.as_ref()));
    let upstream: Arc<tokio::sync::Mutex<Option<Upstream>>> =
        Arc::new(tokio::sync::Mutex::new(None));
    let service = hyper::service::service_fn(move |req| {
        let inner = Arc::clone(&inner);
        let peer = peer.clone();
        let upstream = Arc::clone(&upstream);
        let reset = Arc::clone(&reset);
        async move { handle(inner, peer, upstream, reset, req).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

type Upstream = hyper::client::conn::http1::SendRequest<Body>;

#[derive(Debug, thiserror::Error)]
#[error("connection reset by the fault proxy")]
struct ResetByProxy;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn status_response(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = status_body(code, reason, message).to_string();
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn scripted_response(s: &Scripted) -> Response<Body> {
    let mut r = Response::new(full(s.body.clone()));
    *r.status_mut() = StatusCode::from_u16(s.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in &s.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::try_from(k.as_str()),
            HeaderValue::try_from(v.as_str()),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let h = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = h.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Hop-by-hop headers (RFC 9110 7.6.1) and anything a caller could use to
/// claim an identity through the front-proxy headers.
fn strip(headers: &mut HeaderMap) {
    for h in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(h);
    }
    let forged: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-remote-"))
        .cloned()
        .collect();
    for k in forged {
        headers.remove(k);
    }
}

async fn connect_upstream(inner: &Inner) -> Result<Upstream, BoxError> {
    let tcp = TcpStream::connect(inner.upstream).await?;
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let stream = tokio_rustls::TlsConnector::from(Arc::clone(&inner.upstream_tls))
        .connect(name, tcp)
        .await?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send)
}

async fn handle(
    inner: Arc<Inner>,
    peer: Option<Peer>,
    upstream: Arc<tokio::sync::Mutex<Option<Upstream>>>,
    reset: Arc<std::sync::atomic::AtomicBool>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ResetByProxy> {
    // First, before any await: the arrival number orders this request
    // against clear_requests() marks.
    let arrival = inner.arrivals.fetch_add(1, Ordering::SeqCst);
    let _pending = Pending::new(&inner, arrival);
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let credential = match (&peer, bearer(req.headers())) {
        (Some(p), _) => Some(p.credential_id.clone()),
        (None, Some(t)) => Some(token_credential(t)),
        (None, None) => None,
    };
    let record = |status: u16| {
        inner.record(RequestRecord {
            arrival,
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            user: peer.as_ref().map(|p| p.user.clone()),
            credential: credential.clone(),
            status,
        })
    };

    inner.faults.wait_unhung().await;
    if let Some(d) = inner.faults.slow() {
        tokio::time::sleep(d).await;
    }
    if let Some(s) = inner.faults.take_script(&method, &path) {
        record(s.status);
        if s.reset {
            reset.store(true, Ordering::SeqCst);
            return Err(ResetByProxy);
        }
        return Ok(scripted_response(&s));
    }
    if let Some(p) = &peer {
        if guard(&inner.revoked).contains(&p.serial) {
            // What kube-apiserver answers a certificate it does not accept
            // when no other credential is sent.
            record(401);
            return Ok(status_response(401, "Unauthorized", "Unauthorized"));
        }
    }

    let (mut parts, body) = req.into_parts();
    strip(&mut parts.headers);
    if let Some(p) = &peer {
        // The certificate wins over a token, as in kube-apiserver's union
        // authenticator (request headers and x509 come before tokens).
        parts.headers.remove(http::header::AUTHORIZATION);
        let value = |s: &str| HeaderValue::from_str(s).ok();
        if let Some(v) = value(&p.user) {
            parts.headers.insert("x-remote-user", v);
        }
        for g in &p.groups {
            if let Some(v) = value(g) {
                parts.headers.append("x-remote-group", v);
            }
        }
        if let Some(v) = value(&p.credential_id) {
            parts.headers.insert(
                "x-remote-extra-authentication.kubernetes.io%2fcredential-id",
                v,
            );
        }
    }
    let target = format!(
        "{}{}",
        path,
        if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        }
    );
    let Ok(uri) = target.parse::<http::Uri>() else {
        record(400);
        return Ok(status_response(400, "BadRequest", "unparsable request URI"));
    };
    parts.uri = uri;
    if let Ok(host) = HeaderValue::from_str(&inner.upstream.to_string()) {
        parts.headers.insert(http::header::HOST, host);
    }
    let is_watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let up_req = Request::from_parts(parts, body.map_err(BoxError::from).boxed_unsync());

    let mut slot = upstream.lock().await;
    let usable = match slot.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !usable {
        *slot = match connect_upstream(&inner).await {
            Ok(s) => Some(s),
            Err(e) => {
                record(503);
                return Ok(status_response(
                    503,
                    "ServiceUnavailable",
                    &format!("the fault proxy cannot reach kube-apiserver: {e}"),
                ));
            }
        };
    }
    let Some(send) = slot.as_mut() else {
        record(503);
        return Ok(status_response(503, "ServiceUnavailable", "no upstream"));
    };
    let resp = match send.send_request(up_req).await {
        Ok(r) => r,
        Err(e) => {
            *slot = None;
            record(502);
            return Ok(status_response(
                502,
                "InternalError",
                &format!("the fault proxy lost kube-apiserver: {e}"),
            ));
        }
    };
    drop(slot);
    let (mut parts, body) = resp.into_parts();
    record(parts.status.as_u16());
    strip(&mut parts.headers);
    let mut body = body.map_err(BoxError::from).boxed_unsync();
    if let Some(f) = inner.faults.take_rewrite(&method, &path) {
        body = if is_watch {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            rewrite_watch(body, f)
        } else {
            match rewrite_whole(body, &f).await {
                Ok(b) => {
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    full(b)
                }
                Err(e) => return Ok(status_response(502, "InternalError", &e.to_string())),
            }
        };
    }
    if let Some(d) = inner.faults.trickle() {
        body = trickle(body, d);
    }
    Ok(Response::from_parts(parts, body))
}

async fn rewrite_whole(body: Body, f: &RewriteFn) -> Result<Bytes, BoxError> {
    let bytes = body.collect().await?.to_bytes();
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(bytes);
    };
    f(&mut v);
    Ok(Bytes::from(v.to_string()))
}

/// A watch's events are JSON lines: each event's `object` goes through `f`.
fn rewrite_watch(body: Body, f: RewriteFn) -> Body {
    let stream = futures_util::stream::unfold(
        (body, Vec::<u8>::new(), f),
        |(mut body, mut pending, f)| async move {
            loop {
                if let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=nl).collect();
                    let out = match serde_json::from_slice::<Value>(&line) {
                        Ok(mut ev) => {
                            if let Some(o) = ev.get_mut("object") {
                                f(o);
                            }
                            Bytes::from(format!("{ev}\n"))
                        }
                        Err(_) => Bytes::from(line),
                    };
                    return Some((Ok(Frame::data(out)), (body, pending, f)));
                }
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            pending.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), (body, pending, f))),
                    None if pending.is_empty() => return None,
                    None => {
                        let rest = Bytes::from(std::mem::take(&mut pending));
                        return Some((Ok(Frame::data(rest)), (body, pending, f)));
                    }
                }
            }
        },
    );
    StreamBody::new(stream).boxed_unsync()
}

/// Every frame of the body waits `d` first.
fn trickle(body: Body, d: Duration) -> Body {
    let stream = futures_util::stream::unfold(body, move |mut body| async move {
        let frame = body.frame().await?;
        tokio::time::sleep(d).await;
        Some((frame, body))
    });
    StreamBody::new(stream).boxed_unsync()
}

// ------------------------------------------------------------------- the API

/// A running fault proxy; dropping it stops it. It runs on a runtime of its
/// own, so a test may block (wait for a child process, poll) freely.
pub struct FaultProxy {
    inner: Arc<Inner>,
    cluster: PathBuf,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(h) = guard(&self.inner.accept).take() {
            h.abort();
        }
        self.inner.drop_connections(false);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn apiserver_port(dir: &Path) -> Result<u16, ProxyError> {
    let text = std::fs::read_to_string(dir.join("control-plane.env"))
        .map_err(|_| ProxyError::NoCluster(dir.display().to_string()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("APISERVER_PORT=")?.trim().parse().ok())
        .ok_or_else(|| ProxyError::NoCluster(dir.display().to_string()))
}

impl FaultProxy {
    /// HTTP mode in front of the cluster in `dir` (`control-plane.sh up DIR`).
    pub fn http(dir: &Path) -> Result<FaultProxy, ProxyError> {
        FaultProxy::start(dir, Mode::Http)
    }

    /// TCP passthrough in front of the cluster in `dir`: clients speak TLS
    /// with the real server (its CA, `DIR/ca.crt`) through the proxy's port.
    pub fn tcp(dir: &Path) -> Result<FaultProxy, ProxyError> {
        FaultProxy::start(dir, Mode::Tcp)
    }

    fn start(dir: &Path, mode: Mode) -> Result<FaultProxy, ProxyError> {
        let port = apiserver_port(dir)?;
        let cluster_ca = std::fs::read_to_string(dir.join("ca.crt"))?;
        let client_ca = ClientCa::load(&dir.join("client-ca.crt"), &dir.join("client-ca.key"))?;
        let upstream_tls = tls::upstream_config(dir)?;
        let (serving_ca, server_tls) = match mode {
            Mode::Http => {
                let serving = Serving::generate()?;
                let client_ca_pem = std::fs::read_to_string(dir.join("client-ca.crt"))?;
                let cfg = serving.server_config(&client_ca_pem)?;
                (Some(serving.ca_pem), Some(cfg))
            }
            Mode::Tcp => (None, None),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .map_err(|e| ProxyError::Runtime(e.to_string()))?;
        let bound = {
            let _enter = runtime.enter();
            bind(0).and_then(|l| l.local_addr().map(|a| (l, a.port())))
        };
        let (listener, own_port) = match bound {
            Ok(b) => b,
            Err(e) => {
                // A runtime may not be dropped inside the caller's async context.
                runtime.shutdown_background();
                return Err(e.into());
            }
        };
        let inner = Arc::new(Inner {
            mode,
            port: own_port,
            upstream: SocketAddr::from(([127, 0, 0, 1], port)),
            serving_ca,
            cluster_ca,
            server_tls,
            upstream_tls,
            client_ca,
            revoked: Mutex::new(HashSet::new()),
            faults: Arc::new(FaultState::default()),
            log: Mutex::new(Vec::new()),
            arrivals: std::sync::atomic::AtomicU64::new(0),
            pending: Mutex::new(std::collections::BTreeSet::new()),
            window: std::sync::atomic::AtomicU64::new(0),
            accept: Mutex::new(None),
            conn_gen: watch::channel((0, false)).0,
            open: watch::channel(0).0,
            rt: runtime.handle().clone(),
        });
        let handle = runtime.spawn(accept_loop(Arc::clone(&inner), listener));
        *guard(&inner.accept) = Some(handle);
        Ok(FaultProxy {
            inner,
            cluster: dir.to_path_buf(),
            runtime: Some(runtime),
        })
    }

    /// `https://127.0.0.1:PORT` (the proxy's port).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.inner.port)
    }

    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The CA a client of the proxy trusts: the proxy's own (HTTP mode) or
    /// the cluster's (TCP mode, where the real server's certificate comes
    /// through).
    pub fn ca_pem(&self) -> String {
        self.inner
            .serving_ca
            .clone()
            .unwrap_or_else(|| self.inner.cluster_ca.clone())
    }

    /// The cluster directory behind the proxy.
    pub fn cluster_dir(&self) -> &Path {
        &self.cluster
    }

    /// A client certificate of the cluster's client CA: CN = `user`, O =
    /// `groups` (at most two). Valid on the real server directly as well.
    /// Panics only on a test bug (more than two groups) or a failure of the
    /// key generator; `try_client_cert` returns those instead.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> ClientCert {
        self.try_client_cert(user, groups)
            .unwrap_or_else(|e| panic!("fault proxy client certificate: {e}"))
    }

    pub fn try_client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert, TlsError> {
        self.inner.client_ca.client_cert(user, groups)
    }

    /// The certificate with this serial is refused (401) from the next
    /// request on (HTTP mode; kube-apiserver has no revocation list).
    pub fn revoke(&self, serial: u64) {
        let bytes = tls::trimmed_serial(&serial.to_be_bytes());
        guard(&self.inner.revoked).insert(bytes);
    }

    /// As [`revoke`](Self::revoke), for any certificate (one minted by
    /// openssl, say), given as PEM. False when it cannot be read.
    pub fn revoke_pem(&self, cert_pem: &str) -> bool {
        match tls::pem_serial(cert_pem) {
            Some(s) => {
                guard(&self.inner.revoked).insert(s);
                true
            }
            None => false,
        }
    }

    pub fn kubeconfig_inline(&self, cred: &ClientCert) -> String {
        kubeconfig::inline(&self.url(), &self.ca_pem(), cred)
    }

    pub fn kubeconfig_files(&self, dir: &Path, cred: &ClientCert) -> std::io::Result<PathBuf> {
        kubeconfig::files(dir, &self.url(), &self.ca_pem(), cred)
    }

    /// Kubelet's layout (`pki/kubelet-client-<serial>.pem` behind the
    /// `pki/kubelet-client-current.pem` symlink); called again with a new
    /// certificate on the same `dir`, it is kubelet's rotation.
    pub fn kubeconfig_kubelet_style(
        &self,
        dir: &Path,
        cred: &ClientCert,
    ) -> std::io::Result<PathBuf> {
        kubeconfig::kubelet_style(dir, &self.url(), &self.ca_pem(), cred)
    }

    pub fn kubeconfig_token(&self, token: &str) -> String {
        kubeconfig::token(&self.url(), &self.ca_pem(), token)
    }

    pub fn faults(&self) -> Faults {
        Faults {
            state: Arc::clone(&self.inner.faults),
            proxy: Arc::clone(&self.inner),
        }
    }

    /// Every request answered so far that arrived after the last
    /// [`clear_requests`](Self::clear_requests), in arrival order (HTTP mode).
    pub fn requests(&self) -> Vec<RequestRecord> {
        let from = self.inner.window.load(Ordering::SeqCst);
        let mut reqs: Vec<RequestRecord> = guard(&self.inner.log)
            .iter()
            .filter(|r| r.arrival >= from)
            .cloned()
            .collect();
        reqs.sort_by_key(|r| r.arrival);
        reqs
    }

    /// The record once `holds` is true of it, or as it stands after
    /// `within` (the caller asserts, with the record to show). A request is
    /// recorded once the server has answered it, a moment after a client
    /// may already read its effect through another connection.
    pub fn requests_when(
        &self,
        within: Duration,
        holds: impl Fn(&[RequestRecord]) -> bool,
    ) -> Vec<RequestRecord> {
        let deadline = Instant::now() + within;
        loop {
            let reqs = self.requests();
            if holds(&reqs) || Instant::now() >= deadline {
                return reqs;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a new window: from now on the readers see only requests that
    /// arrive after this call, even those admitted before it and answered
    /// after it. Returns the window's first arrival number.
    pub fn clear_requests(&self) -> u64 {
        let mark = self.inner.arrivals.load(Ordering::SeqCst);
        self.inner.window.store(mark, Ordering::SeqCst);
        guard(&self.inner.log).retain(|r| r.arrival >= mark);
        mark
    }

    /// How many requests have arrived so far, answered or not: the number
    /// the next request gets. A test that needs a client's request to have
    /// reached the proxy (a watch opened, a write in flight) waits for this
    /// to move, not for a time.
    pub fn arrived(&self) -> u64 {
        self.inner.arrivals.load(Ordering::SeqCst)
    }

    /// Returns once every request that arrived before `mark` (a
    /// [`clear_requests`](Self::clear_requests) mark) has been answered, or
    /// after `within` (false). Then nothing admitted before the mark can
    /// still reach the server: a time mark taken after this (an audit mark)
    /// separates the two windows on the server's side too.
    pub fn settled_before(&self, mark: u64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if guard(&self.inner.pending).range(..mark).next().is_none() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Connections open through the proxy now.
    pub fn open_connections(&self) -> usize {
        *self.inner.open.borrow()
    }
}
