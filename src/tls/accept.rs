//! Accept loops for `tonic::transport::Server::serve_with_incoming`.
//!
//! Handshakes run in their own tasks, with a cap on how many are in flight
//! in total and per peer address. The ClientHello must arrive within a
//! short deadline and the whole handshake within a longer one. A peer that
//! connects and sends nothing costs one slot for at most the ClientHello
//! deadline, and less under pressure: when every slot is taken, the oldest
//! handshake still waiting for its ClientHello is dropped to make room, so
//! silent sockets can never lock a real client out. Only when every slot
//! holds a handshake past its ClientHello, or the peer's address holds its
//! share, is a new connection closed at once (shed) instead of queueing
//! behind the slow ones. Failed handshakes are counted, logged at debug at
//! most once a second, and dropped; the stream itself never ends or yields
//! an error while its consumer holds it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::rustls::server::Acceptor;
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;
use tokio_stream::Stream;

use super::server::ServerTls;

/// Bounds on the TLS accept path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptLimits {
    /// A handshake not finished by then is abandoned and its socket closed.
    pub handshake_timeout: Duration,
    /// A peer whose ClientHello is not complete by then is cut (a real
    /// client sends it at once); the rest of the handshake then has what is
    /// left of `handshake_timeout`.
    pub hello_timeout: Duration,
    /// Handshakes in flight at once, over all peers (at least 1).
    pub max_handshakes: usize,
    /// Handshakes in flight at once from one IPv4 address or IPv6 /64
    /// ([`address_key`]); 0 = no per-address cap.
    pub max_handshakes_per_ip: usize,
}

impl Default for AcceptLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            hello_timeout: Duration::from_secs(3),
            max_handshakes: 256,
            max_handshakes_per_ip: 16,
        }
    }
}

/// Counters of one accept loop, shared with whoever holds the stream.
#[derive(Debug, Default)]
pub struct AcceptStats {
    accepted: AtomicU64,
    handshakes_ok: AtomicU64,
    handshakes_failed: AtomicU64,
    handshakes_timed_out: AtomicU64,
    shed: AtomicU64,
    evicted: AtomicU64,
    accept_errors: AtomicU64,
    in_flight: AtomicU64,
}

/// A point-in-time copy of [`AcceptStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcceptCounts {
    /// TCP connections accepted.
    pub accepted: u64,
    /// Handshakes completed and handed to the server.
    pub handshakes_ok: u64,
    /// Handshakes the peer or rustls broke off (no/unknown/expired client
    /// certificate, garbage, closed early).
    pub handshakes_failed: u64,
    /// Handshakes abandoned at the timeout.
    pub handshakes_timed_out: u64,
    /// Connections closed unanswered because a cap was reached.
    pub shed: u64,
    /// Handshakes still waiting for their ClientHello, dropped to make room
    /// for a new connection while every slot was taken.
    pub evicted: u64,
    /// `accept(2)` failures (e.g. EMFILE).
    pub accept_errors: u64,
    /// Handshakes running now.
    pub in_flight: u64,
}

impl AcceptStats {
    /// Reads all counters (each atomically, not all together).
    pub fn snapshot(&self) -> AcceptCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AcceptCounts {
            accepted: get(&self.accepted),
            handshakes_ok: get(&self.handshakes_ok),
            handshakes_failed: get(&self.handshakes_failed),
            handshakes_timed_out: get(&self.handshakes_timed_out),
            shed: get(&self.shed),
            evicted: get(&self.evicted),
            accept_errors: get(&self.accept_errors),
            in_flight: get(&self.in_flight),
        }
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// TLS connections for `serve_with_incoming`; see [`incoming`].
///
/// Dropping it stops the accept loop, closes the listening socket and aborts
/// handshakes in flight.
pub struct TlsIncoming {
    inner: Incoming<TlsStream<TcpStream>, TlsSetup>,
}

struct TlsSetup {
    tls: ServerTls,
    limits: AcceptLimits,
}

/// The accept machinery: the accept task starts on first poll (so
/// building the stream can neither fail nor need a runtime), hands
/// connections over a bounded channel, and is aborted on drop.
struct Incoming<T, S> {
    start: Option<(TcpListener, S, mpsc::Sender<T>)>,
    rx: mpsc::Receiver<T>,
    stats: Arc<AcceptStats>,
    task: Option<JoinHandle<()>>,
}

impl<T, S> Incoming<T, S> {
    fn new(listener: TcpListener, setup: S, capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Self {
            start: Some((listener, setup, tx)),
            rx,
            stats: Arc::new(AcceptStats::default()),
            task: None,
        }
    }

    fn poll_next_with<F>(&mut self, cx: &mut Context<'_>, spawn: F) -> Poll<Option<T>>
    where
        F: FnOnce(TcpListener, S, mpsc::Sender<T>, Arc<AcceptStats>) -> JoinHandle<()>,
    {
        if let Some((listener, setup, tx)) = self.start.take() {
            self.task = Some(spawn(listener, setup, tx, Arc::clone(&self.stats)));
        }
        self.rx.poll_recv(cx)
    }
}

impl<T, S> Drop for Incoming<T, S> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Accepts TCP connections from `listener` and yields those whose TLS
/// handshake with the configuration of `tls` (as current at accept time)
/// succeeded. Never yields `Err` and never ends on its own; see the module
/// notes for the limits.
pub fn incoming(listener: TcpListener, tls: ServerTls, limits: AcceptLimits) -> TlsIncoming {
    let capacity = limits.max_handshakes;
    TlsIncoming {
        inner: Incoming::new(listener, TlsSetup { tls, limits }, capacity),
    }
}

impl TlsIncoming {
    /// The counters of this accept loop.
    pub fn stats(&self) -> Arc<AcceptStats> {
        Arc::clone(&self.inner.stats)
    }
}

impl Stream for TlsIncoming {
    type Item = Result<TlsStream<TcpStream>, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .inner
            .poll_next_with(cx, |listener, setup, tx, stats| {
                tokio::spawn(tls_accept_loop(listener, setup, tx, stats))
            })
            .map(|item| item.map(Ok))
    }
}

async fn tls_accept_loop(
    listener: TcpListener,
    setup: TlsSetup,
    tx: mpsc::Sender<TlsStream<TcpStream>>,
    stats: Arc<AcceptStats>,
) {
    let TlsSetup { tls, limits } = setup;
    let pool = Arc::new(Pool::new(limits.max_handshakes));
    let per_ip = PerAddress::new(limits.max_handshakes_per_ip);
    let quiet = Arc::new(QuietLog::new());
    // Owned here so that when this loop ends (stream dropped, task aborted)
    // every handshake in flight is aborted with it.
    let mut handshakes = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                on_accept_error(&err, &stats, &quiet).await;
                continue;
            }
        };
        AcceptStats::bump(&stats.accepted);
        // The address's share first: a flooding address must not evict
        // anyone else's handshake.
        let Some(ip_slot) = per_ip.take(peer.ip()) else {
            shed(
                tcp,
                peer,
                &stats,
                &quiet,
                "connection shed: too many TLS handshakes from this address",
            );
            continue;
        };
        let (slot, evicted) = match pool.take() {
            Some(taken) => taken,
            None => {
                shed(
                    tcp,
                    peer,
                    &stats,
                    &quiet,
                    "connection shed: too many TLS handshakes in flight",
                );
                continue;
            }
        };
        if evicted {
            AcceptStats::bump(&stats.evicted);
            quiet.debug(
                peer,
                "dropped the oldest handshake still waiting for its ClientHello to make room",
            );
        }
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let tx = tx.clone();
        let stats = Arc::clone(&stats);
        let quiet = Arc::clone(&quiet);
        let (timeout, hello_timeout) = (limits.handshake_timeout, limits.hello_timeout);
        handshakes.spawn(async move {
            let _in_flight = InFlight::enter(&stats);
            let _ip_slot = ip_slot;
            let deadline = tokio::time::Instant::now() + timeout;
            let hello_deadline = deadline.min(tokio::time::Instant::now() + hello_timeout);
            let lazy = LazyConfigAcceptor::new(Acceptor::default(), tcp);
            let hello = tokio::select! {
                () = slot.evicted.notified() => return,
                hello = tokio::time::timeout_at(hello_deadline, lazy) => hello,
            };
            let start = match hello {
                Ok(Ok(start)) => start,
                Ok(Err(err)) => {
                    AcceptStats::bump(&stats.handshakes_failed);
                    quiet.debug_err(peer, "TLS handshake failed", &err);
                    return;
                }
                Err(_) => {
                    AcceptStats::bump(&stats.handshakes_timed_out);
                    quiet.debug(peer, "no ClientHello in time");
                    return;
                }
            };
            if !slot.hello_done() {
                // Evicted just as its ClientHello came: its slot is gone.
                return;
            }
            match tokio::time::timeout_at(deadline, start.into_stream(tls.config())).await {
                Ok(Ok(stream)) => {
                    AcceptStats::bump(&stats.handshakes_ok);
                    drop(_in_flight);
                    // Holding the slots until the server takes the stream
                    // keeps the number of finished-but-unserved connections
                    // bounded too.
                    let _ = tx.send(stream).await;
                }
                Ok(Err(err)) => {
                    AcceptStats::bump(&stats.handshakes_failed);
                    quiet.debug_err(peer, "TLS handshake failed", &err);
                }
                Err(_) => {
                    AcceptStats::bump(&stats.handshakes_timed_out);
                    quiet.debug(peer, "TLS handshake timed out");
                }
            }
        });
    }
}

/// The global handshake slots, and which of their holders still wait for
/// their ClientHello, oldest first: those are the ones a new connection may
/// take the place of.
struct Pool {
    max: usize,
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    held: usize,
    next_id: u64,
    waiting_hello: BTreeMap<u64, Arc<Notify>>,
    /// Evicted holders whose slot went to a newcomer; their own drop must
    /// not give it back a second time.
    evicted: HashSet<u64>,
}

impl Pool {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            state: Mutex::default(),
        }
    }

    /// A slot, free or taken from the oldest handshake still waiting for
    /// its ClientHello (`true`: one was evicted). `None` when every slot
    /// holds a handshake past its ClientHello.
    fn take(self: &Arc<Self>) -> Option<(PoolSlot, bool)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let evicted = if state.held < self.max {
            state.held += 1;
            false
        } else {
            let (old, notify) = state.waiting_hello.pop_first()?;
            state.evicted.insert(old);
            notify.notify_one();
            true
        };
        let id = state.next_id;
        state.next_id += 1;
        let notify = Arc::new(Notify::new());
        state.waiting_hello.insert(id, Arc::clone(&notify));
        Some((
            PoolSlot {
                pool: Arc::clone(self),
                id,
                evicted: notify,
            },
            evicted,
        ))
    }
}

/// One handshake's slot, given back on drop (unless it was handed on).
struct PoolSlot {
    pool: Arc<Pool>,
    id: u64,
    /// Notified when a newcomer took this slot.
    evicted: Arc<Notify>,
}

impl PoolSlot {
    /// Marks the ClientHello as arrived; `false` when the slot was taken
    /// away meanwhile.
    fn hello_done(&self) -> bool {
        let mut state = self
            .pool
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.waiting_hello.remove(&self.id).is_some()
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        let mut state = self
            .pool
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !state.evicted.remove(&self.id) {
            state.waiting_hello.remove(&self.id);
            state.held = state.held.saturating_sub(1);
        }
    }
}

/// Closes a connection unanswered. A reset rather than a FIN leaves no
/// TIME_WAIT socket behind on our side, which matters under a flood.
fn shed(tcp: TcpStream, peer: SocketAddr, stats: &AcceptStats, quiet: &QuietLog, why: &str) {
    AcceptStats::bump(&stats.shed);
    let _ = tcp.set_zero_linger();
    drop(tcp);
    quiet.debug(peer, why);
}

/// Per-connection errors (the peer gave up before we accepted) are routine;
/// resource exhaustion (EMFILE, ENFILE, ENOBUFS, ENOMEM) would make accept
/// fail in a hot loop, so back off briefly and say so.
async fn on_accept_error(err: &std::io::Error, stats: &AcceptStats, quiet: &QuietLog) {
    AcceptStats::bump(&stats.accept_errors);
    let per_connection = matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::Interrupted
    ) || matches!(err.raw_os_error(), Some(libc::EPROTO | libc::EPERM));
    if per_connection {
        return;
    }
    if quiet.allow() {
        tracing::warn!(error = %err, "accept failed; pausing 100 ms");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// What per-address caps count by: an IPv4 address, or the /64 of an IPv6
/// one (a single host is usually given a whole /64, so counting each IPv6
/// address alone would let one host take every slot). An IPv4 peer on a
/// dual-stack socket arrives as ::ffff:a.b.c.d and counts as that IPv4
/// address.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// Connections held at once per peer address ([`address_key`]:
/// an IPv4 address or an IPv6 /64), from accept until the connection
/// closes (the gRPC and HTTP ports), or for a TLS handshake (the accept
/// loop). Cloning shares the counts.
#[derive(Debug, Clone)]
pub struct PerAddress {
    limit: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerAddress {
    /// At most `limit` connections per address; 0 = no cap.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            counts: Arc::default(),
        }
    }

    /// A slot for a connection from `ip`, or `None` when its address holds
    /// `limit` already. `Some(None)` without a cap.
    pub fn take(&self, ip: IpAddr) -> Option<Option<AddressSlot>> {
        if self.limit == 0 {
            return Some(None);
        }
        let key = address_key(ip);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(key).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Some(AddressSlot {
            counts: Arc::clone(&self.counts),
            key,
        }))
    }
}

/// One connection's place in its address's count, given back on drop.
#[derive(Debug)]
pub struct AddressSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    key: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// Keeps `in_flight` right however the handshake task ends (aborts too).
struct InFlight<'a>(&'a AcceptStats);

impl<'a> InFlight<'a> {
    fn enter(stats: &'a AcceptStats) -> Self {
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(stats)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// At most one log line per second from the accept path, with the number of
/// lines swallowed since the last one: a flood of garbage must not become a
/// flood of logs.
struct QuietLog {
    origin: Instant,
    /// Milliseconds since `origin` of the last line, plus one (0 = never).
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl QuietLog {
    const EVERY_MS: u64 = 1000;

    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    fn allow(&self) -> bool {
        let now = u64::try_from(self.origin.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= Self::EVERY_MS;
        if due
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        false
    }

    fn debug(&self, peer: SocketAddr, what: &str) {
        if tracing::enabled!(tracing::Level::DEBUG) && self.allow() {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::debug!(%peer, suppressed, "{what}");
        }
    }

    fn debug_err(&self, peer: SocketAddr, what: &str, err: &std::io::Error) {
        if tracing::enabled!(tracing::Level::DEBUG) && self.allow() {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::debug!(%peer, error = %err, suppressed, "{what}");
        }
    }
}
