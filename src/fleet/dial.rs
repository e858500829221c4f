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
}

/// A connector for `Endpoint::connect_with_connector` that always dials
/// `addr` (the URI only names the host for TLS and `:authority`).
pub(crate) fn connector(
    addr: Address,
    connect_timeout: Duration,
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
        async move { dial(&addr, connect_timeout).await.map(TokioIo::new) }
    })
}

/// Resolves (names only) and connects to the first address that accepts.
/// With several addresses each attempt gets an equal share of
/// `connect_timeout`, so one black-holed address cannot use all of it.
async fn dial(addr: &Address, connect_timeout: Duration) -> Result<TcpStream, DialError> {
    let targets: Vec<SocketAddr> = match &addr.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, addr.port)],
        Host::Name(name) => tokio::net::lookup_host((name.as_str(), addr.port))
            .await
            .map_err(DialError::Resolve)?
            .collect(),
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
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
        let e = dial(&refused, Duration::from_secs(2)).await.unwrap_err();
        assert!(
            matches!(&e, DialError::Connect(io) if io.kind() == io::ErrorKind::ConnectionRefused),
            "{e:?}"
        );
        let unknown = Address {
            host: Host::Name("no-such-host.invalid".into()),
            port,
        };
        let e = dial(&unknown, Duration::from_secs(2)).await.unwrap_err();
        assert!(matches!(e, DialError::Resolve(_)), "{e:?}");
    }
}
