//! Dialling one agent: resolve its name, then open TCP. Each step fails
//! with its own [`DialError`] variant, so the client tells "cannot resolve"
//! from "connection refused" by type, not by reading error text.

use std::{io, net::SocketAddr, time::Duration};

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::TcpStream;
use tonic::transport::Uri;

use super::nodes::{Address, Host};

/// Why TCP to an agent could not be opened.
#[derive(Debug, Error)]
pub enum DialError {
    #[error("{0}")]
    Resolve(#[source] io::Error),
    #[error("the name resolved to no address")]
    NoAddress,
    #[error("{0}")]
    Connect(#[source] io::Error),
    /// Plaintext is allowed only to loopback, and a name (even `localhost`)
    /// counts only when every address it resolves to is loopback.
    #[error("{name} resolves to {addr}, which is not a loopback address")]
    NotLoopback { name: String, addr: SocketAddr },
}

/// Where a dial may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    Anywhere,
    /// Plaintext without `--insecure-plaintext`: loopback addresses only.
    LoopbackOnly,
}

/// A connector for `Endpoint::connect_with_connector` that always dials
/// `addr` (the URI only names the host for TLS and `:authority`).
pub(crate) fn connector(
    addr: Address,
    connect_timeout: Duration,
    reach: Reach,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<TcpStream>,
    Error = DialError,
    Future = impl std::future::Future<Output = Result<TokioIo<TcpStream>, DialError>> + Send,
> + Send
       + Clone
       + 'static {
    tower::service_fn(move |_: Uri| {
        let addr = addr.clone();
        async move { dial(&addr, connect_timeout, reach).await.map(TokioIo::new) }
    })
}

/// Resolves (names only) and connects to the first address that accepts.
/// With several addresses each attempt gets an equal share of
/// `connect_timeout`, so one black-holed address cannot use all of it.
async fn dial(
    addr: &Address,
    connect_timeout: Duration,
    reach: Reach,
) -> Result<TcpStream, DialError> {
    let targets: Vec<SocketAddr> = match &addr.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, addr.port)],
        Host::Name(name) => {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), addr.port))
                .await
                .map_err(DialError::Resolve)?
                .collect();
            if reach == Reach::LoopbackOnly {
                only_loopback(name, &found)?;
            }
            found
        }
    };
    let share = u32::try_from(targets.len())
        .ok()
        .filter(|&n| n > 1)
        .map_or(connect_timeout, |n| connect_timeout / n);
    let mut last = None;
    for target in targets {
        let attempt = tokio::time::timeout(share, TcpStream::connect(target)).await;
        match attempt {
            Ok(Ok(stream)) => {
                // Small requests and answers: do not wait to batch them.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(io::Error::from(io::ErrorKind::TimedOut)),
        }
    }
    Err(last.map_or(DialError::NoAddress, DialError::Connect))
}

/// Refuses a name that resolved to anything but loopback: a hosts file or
/// resolver that maps `localhost` elsewhere must not turn plaintext remote.
fn only_loopback(name: &str, found: &[SocketAddr]) -> Result<(), DialError> {
    match found.iter().find(|a| !a.ip().to_canonical().is_loopback()) {
        Some(a) => Err(DialError::NotLoopback {
            name: name.to_string(),
            addr: *a,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_name_counts_as_loopback_only_when_every_address_is() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(only_loopback("localhost", &[a("127.0.0.1:1"), a("[::1]:1")]).is_ok());
        assert!(only_loopback("localhost", &[a("[::ffff:127.0.0.2]:1")]).is_ok());
        let e = only_loopback("localhost", &[a("127.0.0.1:1"), a("192.0.2.7:1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "localhost resolves to 192.0.2.7:1, which is not a loopback address"
        );
    }
    use std::net::{IpAddr, Ipv4Addr};

    #[tokio::test]
    async fn each_step_fails_with_its_own_variant() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let refused = Address {
            host: Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port,
        };
        let e = dial(&refused, Duration::from_secs(2), Reach::Anywhere)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, DialError::Connect(io) if io.kind() == io::ErrorKind::ConnectionRefused),
            "{e:?}"
        );
        let unknown = Address {
            host: Host::Name("no-such-host.invalid".into()),
            port,
        };
        let e = dial(&unknown, Duration::from_secs(2), Reach::Anywhere)
            .await
            .unwrap_err();
        assert!(matches!(e, DialError::Resolve(_)), "{e:?}");
    }
}
