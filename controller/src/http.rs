//! The component's endpoints, plain HTTP/1.1 (hyper): `/healthz` (the
//! process answers), `/readyz` (the management caches listed; a leader
//! and a standby are both ready: a standby must stay in the Service's
//! endpoints' view of a healthy pod, and it takes over without a restart),
//! `/metrics` (Prometheus text). GET (and HEAD) only; nothing else.

use std::{convert::Infallible, net::SocketAddr};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The answer to one request: (status, content type, body). Pure.
pub fn answer(
    method: &Method,
    path: &str,
    synced: bool,
    metrics: impl FnOnce() -> String,
) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n".into());
    }
    match path {
        "/healthz" | "/livez" => (StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" if synced => (StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "caches not yet synced\n".into(),
        ),
        "/metrics" => (StatusCode::OK, METRICS_TYPE, metrics()),
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let m = crate::metrics::global();
    let (status, ty, body) = answer(req.method(), req.uri().path(), m.synced(), || {
        m.render(env!("CARGO_PKG_VERSION"))
    });
    let body = if req.method() == Method::HEAD {
        String::new()
    } else {
        body
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ty) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    Ok(resp)
}

/// Binds `addr` (an error is one line for the caller) and serves in the
/// background; returns the bound address.
pub async fn serve(addr: SocketAddr) -> Result<SocketAddr, std::io::Error> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and the like: wait a little rather than spin.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                let conn = http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service_fn(handle));
                let _ = conn.await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = || "x 1\n".to_string();
        assert_eq!(answer(&Method::GET, "/healthz", false, m).0, StatusCode::OK);
        assert_eq!(
            answer(&Method::GET, "/readyz", false, m).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(answer(&Method::GET, "/readyz", true, m).0, StatusCode::OK);
        let (s, ty, b) = answer(&Method::GET, "/metrics", false, m);
        assert_eq!((s, ty, b.as_str()), (StatusCode::OK, METRICS_TYPE, "x 1\n"));
        assert_eq!(
            answer(&Method::POST, "/metrics", true, m).0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(answer(&Method::GET, "/", true, m).0, StatusCode::NOT_FOUND);
    }
}
