//! The component's endpoints, plain HTTP/1.1 (hyper): `/healthz` (the
//! controller loop has shown a sign of life lately: a reconcile, or the
//! periodic resync tick it consumes; a stopped or wedged loop fails it, so
//! the kubelet restarts the pod), `/readyz` (the management caches listed; a leader
//! and a standby are both ready: a standby must stay in the Service's
//! endpoints' view of a healthy pod, and it takes over without a restart),
//! `/metrics` (Prometheus text). GET (and HEAD) only; nothing else.

use std::{convert::Infallible, sync::Arc};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::{Gauges, Metrics};

/// What the endpoints read: the metrics, the gauges of the moment (from
/// the Machine cache), and how long the loop may stay silent.
#[derive(Clone)]
pub struct Endpoints {
    pub metrics: Arc<Metrics>,
    pub gauges: Arc<dyn Fn() -> Gauges + Send + Sync>,
    pub stall_after: std::time::Duration,
}

const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The answer to one request: (status, content type, body). Pure.
pub fn answer(
    method: &Method,
    path: &str,
    synced: bool,
    progressing: bool,
    metrics: impl FnOnce() -> String,
) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n".into());
    }
    match path {
        "/healthz" | "/livez" if progressing => (StatusCode::OK, TEXT, "ok\n".into()),
        "/healthz" | "/livez" => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "the reconcile loop has stopped making progress\n".into(),
        ),
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

async fn handle(req: Request<Incoming>, e: Endpoints) -> Result<Response<Full<Bytes>>, Infallible> {
    let m = &e.metrics;
    let (status, ty, body) = answer(
        req.method(),
        req.uri().path(),
        m.synced(),
        m.progressing(e.stall_after),
        || m.render(env!("CARGO_PKG_VERSION"), &(e.gauges)()),
    );
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

/// Serves `listener` (bound at start by [`crate::ops::Ops::start`]) in the
/// background.
pub fn serve(listener: TcpListener, e: Endpoints) {
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
            let e = e.clone();
            tokio::spawn(async move {
                let conn = http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(
                        TokioIo::new(stream),
                        service_fn(move |r| handle(r, e.clone())),
                    );
                let _ = conn.await;
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = || "x 1\n".to_string();
        assert_eq!(
            answer(&Method::GET, "/healthz", false, true, m).0,
            StatusCode::OK
        );
        assert_eq!(
            answer(&Method::GET, "/healthz", true, false, m).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            answer(&Method::GET, "/readyz", false, true, m).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            answer(&Method::GET, "/readyz", true, true, m).0,
            StatusCode::OK
        );
        let (s, ty, b) = answer(&Method::GET, "/metrics", false, true, m);
        assert_eq!((s, ty, b.as_str()), (StatusCode::OK, METRICS_TYPE, "x 1\n"));
        assert_eq!(
            answer(&Method::POST, "/metrics", true, true, m).0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            answer(&Method::GET, "/", true, true, m).0,
            StatusCode::NOT_FOUND
        );
    }
}
