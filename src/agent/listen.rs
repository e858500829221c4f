//! Listening sockets: many `--listen` addresses merged into one stream of
//! connections, a cap on connections held at once in total and per peer
//! address (so a handful of addresses cannot take every slot), (for
//! plaintext) a deadline for the HTTP/2 preface so idle sockets cannot pile
//! up, and a maximum age: the server sends GOAWAY at the age, Watch
//! streams end then ([`ConnInfo::ends_at`]), and a connection still open a
//! grace period later is closed.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{mpsc, OwnedSemaphorePermit, Semaphore},
    time::{Instant, Sleep},
};
use tokio_rustls::server::TlsStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::debug;

use crate::tls::{AddressSlot, PerAddress};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection of either kind. One type for both, so the whole HTTP/2 and
/// gRPC server stack is compiled once rather than once per transport.
#[derive(Debug)]
pub enum Io {
    Plain(PlainConn),
    Tls(Box<TlsStream<TcpStream>>),
}

impl From<PlainConn> for Io {
    fn from(c: PlainConn) -> Self {
        Io::Plain(c)
    }
}

impl From<TlsStream<TcpStream>> for Io {
    fn from(c: TlsStream<TcpStream>) -> Self {
        Io::Tls(Box::new(c))
    }
}

/// Runs `$body` with `$io` bound to the pinned stream to write to, whichever kind.
macro_rules! with_io {
    ($self:expr, $io:ident => $body:expr) => {
        match $self {
            // Writes go straight to the socket; only reads replay the preface.
            Io::Plain(c) => {
                let $io = Pin::new(&mut c.0);
                $body
            }
            Io::Tls(c) => {
                let $io = Pin::new(c.as_mut());
                $body
            }
        }
    };
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(c) => Pin::new(c).poll_read(cx, buf),
            Io::Tls(c) => Pin::new(c.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        with_io!(self.get_mut(), io => io.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with_io!(self.get_mut(), io => io.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with_io!(self.get_mut(), io => io.poll_shutdown(cx))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        with_io!(self.get_mut(), io => io.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(c) => c.0.is_write_vectored(),
            Io::Tls(c) => c.is_write_vectored(),
        }
    }
}

/// How long connections live: GOAWAY at `age` (tonic's
/// `max_connection_age`), Watch streams end then too, and the socket is
/// closed `grace` later whatever is still running on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxAge {
    pub age: Duration,
    pub grace: Duration,
}

/// What handlers learn about their connection (in each request's
/// extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub tcp: TcpConnectInfo,
    /// When the connection reaches its maximum age: streams that would
    /// otherwise never end (Watch) end then, cleanly, so the client
    /// reconnects on a new connection.
    pub ends_at: Option<Instant>,
}

/// A connection that gives back its slots when dropped.
#[derive(Debug)]
pub struct Counted {
    inner: Io,
    _slot: OwnedSemaphorePermit,
    _address: Option<AddressSlot>,
    ends_at: Option<Instant>,
    /// The end of the grace period: reads end (EOF) from then on, and the
    /// server drops the connection.
    closes: Option<Pin<Box<Sleep>>>,
}

impl Connected for Counted {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        let tcp = match &self.inner {
            Io::Plain(c) => c.0.connect_info(),
            Io::Tls(c) => c.get_ref().0.connect_info(),
        };
        ConnInfo {
            tcp,
            ends_at: self.ends_at,
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The server always has a read pending, so this registers the timer.
        if let Some(closes) = &mut this.closes {
            if closes.as_mut().poll(cx).is_ready() {
                debug!("closing a connection past its maximum age and grace period");
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Merges per-listener connection streams into one, holding a slot of
/// `slots` and one of its address in `per_address` for each connection
/// (a plaintext one brings its address slot from accept); connections
/// beyond either cap are closed at once. With `max_age`, each connection's
/// age counts from here.
pub fn merge<S, T>(
    streams: Vec<S>,
    slots: Arc<Semaphore>,
    per_address: PerAddress,
    max_age: Option<MaxAge>,
) -> tokio_stream::wrappers::ReceiverStream<Result<Counted, io::Error>>
where
    S: Stream<Item = Result<T, io::Error>> + Send + Unpin + 'static,
    T: Into<Io> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Counted, io::Error>>(64);
    for mut s in streams {
        let tx = tx.clone();
        let slots = slots.clone();
        let per_address = per_address.clone();
        tokio::spawn(async move {
            while let Some(item) = s.next().await {
                let Ok(conn) = item else { continue };
                let mut inner: Io = conn.into();
                let (slot, address) = match &mut inner {
                    // Counted from accept on, slots taken there.
                    Io::Plain(c) => match c.2.take() {
                        Some(held) => (held.slot, held.address),
                        None => continue,
                    },
                    Io::Tls(c) => {
                        let Ok(peer) = c.get_ref().0.peer_addr() else {
                            continue;
                        };
                        let Some(a) = per_address.take(peer.ip()) else {
                            debug!(%peer, "per-address connection limit reached; closing a new connection");
                            continue;
                        };
                        let Ok(slot) = slots.clone().try_acquire_owned() else {
                            debug!("connection limit reached; closing a new connection");
                            continue;
                        };
                        (slot, a)
                    }
                };
                let ends_at = max_age.and_then(|m| Instant::now().checked_add(m.age));
                let closes = max_age
                    .zip(ends_at)
                    .and_then(|(m, end)| end.checked_add(m.grace))
                    .map(|at| Box::pin(tokio::time::sleep_until(at)));
                if tx
                    .send(Ok(Counted {
                        inner,
                        _slot: slot,
                        _address: address,
                        ends_at,
                        closes,
                    }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Plain TCP connections that sent the HTTP/2 preface within `deadline`.
/// The check consumes the preface and [`PlainConn`] hands it back to the
/// server, so the server still reads it itself. Each connection holds a
/// slot of `slots` (the same connection cap [`merge`] applies) and one of
/// its address in `per_address` from accept on, and carries them to
/// [`merge`]: an idle socket costs a descriptor as much as a served one.
pub fn plaintext(
    listener: TcpListener,
    deadline: Duration,
    slots: Arc<Semaphore>,
    per_address: PerAddress,
) -> impl Stream<Item = Result<PlainConn, io::Error>> + Send + Unpin {
    let (tx, rx) = mpsc::channel::<Result<PlainConn, io::Error>>(64);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    debug!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(address) = per_address.take(peer.ip()) else {
                shed(stream);
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                shed(stream);
                continue;
            };
            // A response goes out as several small writes (headers, data,
            // trailers); with Nagle on, the last one waits for the client's
            // delayed ACK, ~40 ms per call (tonic's tcp_nodelay option does
            // not reach a custom incoming stream).
            let _ = stream.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            let tx = tx.clone();
            tokio::spawn(async move {
                let held = Held { slot, address };
                let mut stream = stream;
                if let Ok(true) = tokio::time::timeout(deadline, preface(&mut stream)).await {
                    let _ = tx.send(Ok(PlainConn(stream, 0, Some(held)))).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Reads the preface, never more. Reading (not peeking) matters: a peer
/// that sent part of it leaves the socket readable, and re-peeking until
/// the rest arrives would spin; a read waits for new bytes instead.
async fn preface(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; PREFACE.len()];
    let mut got = 0;
    while got < PREFACE.len() {
        match stream.read(&mut buf[got..]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                got += n;
                if buf[..got] != PREFACE[..got] {
                    return false;
                }
            }
        }
    }
    true
}

/// Closes a connection beyond a cap unanswered, with a reset: no TIME_WAIT
/// socket stays behind on our side during a flood.
fn shed(stream: TcpStream) {
    let _ = stream.set_zero_linger();
}

/// A plaintext connection that passed the preface check; the second field
/// counts the preface bytes already handed back to the server, the third
/// holds its slots until [`merge`] takes them over.
#[derive(Debug)]
pub struct PlainConn(TcpStream, usize, Option<Held>);

/// The slots a plaintext connection took at accept.
#[derive(Debug)]
pub struct Held {
    slot: OwnedSemaphorePermit,
    address: Option<AddressSlot>,
}

impl AsyncRead for PlainConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.1 < PREFACE.len() {
            let rest = &PREFACE[this.1..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.1 += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.0).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn plaintext_connections_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = plaintext(
            listener,
            Duration::from_secs(5),
            Arc::new(Semaphore::new(4)),
            PerAddress::new(0),
        );
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(PREFACE).await.unwrap();
        let conn = tokio::time::timeout(Duration::from_secs(5), conns.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(conn.0.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_preface_sent_in_pieces_reaches_the_server_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = plaintext(
            listener,
            Duration::from_secs(5),
            Arc::new(Semaphore::new(4)),
            PerAddress::new(0),
        );
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(&PREFACE[..5]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.write_all(&PREFACE[5..]).await.unwrap();
        client.write_all(b"after").await.unwrap();
        let mut conn = tokio::time::timeout(Duration::from_secs(5), conns.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let mut got = vec![0u8; PREFACE.len() + 5];
        conn.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..PREFACE.len()], PREFACE);
        assert_eq!(&got[PREFACE.len()..], b"after");
    }
}
