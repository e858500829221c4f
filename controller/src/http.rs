//! The component's endpoints: `/healthz` (the controller loop has shown a
//! sign of life lately: a reconcile, or the periodic resync tick it
//! consumes; a stopped or wedged loop fails it, so the kubelet restarts the
//! pod), `/readyz` (the management caches listed; a leader and a standby
//! are both ready: a standby must stay in the Service's endpoints' view of
//! a healthy pod, and it takes over without a restart), `/metrics`
//! (Prometheus text). Served by the node crate's server
//! ([`sandbox_readiness::endpoints`]: GET and HEAD only, bounded
//! connections), plaintext: the pod's port is for the kubelet's probes and
//! the cluster's Prometheus, and says nothing a tenant could use.

use std::sync::Arc;

use sandbox_readiness::endpoints::{self, Answer, Limits, StatusCode};
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

/// The answer on `path`. Pure.
pub fn answer(
    path: &str,
    ready: Result<(), String>,
    progressing: bool,
    metrics: impl FnOnce() -> String,
) -> Answer {
    match path {
        "/healthz" | "/livez" if progressing => Answer::text(StatusCode::OK, "ok"),
        "/healthz" | "/livez" => Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the reconcile loop has stopped making progress",
        ),
        "/readyz" => match ready {
            Ok(()) => Answer::text(StatusCode::OK, "ok"),
            Err(why) => Answer::text(StatusCode::SERVICE_UNAVAILABLE, &why),
        },
        "/metrics" => Answer::metrics(metrics()),
        _ => Answer::text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Serves `listener` (bound at start by [`crate::ops::Ops::start`]) in the
/// background.
pub fn serve(listener: TcpListener, e: Endpoints) {
    tokio::spawn(endpoints::serve_plain(
        listener,
        Limits::default(),
        move |path| {
            let m = &e.metrics;
            answer(path, m.ready(), m.progressing(e.stall_after), || {
                m.render(env!("CARGO_PKG_VERSION"), &(e.gauges)())
            })
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = || "x 1\n".to_string();
        let status = |path, synced: bool, progressing| {
            let ready = if synced {
                Ok(())
            } else {
                Err("caches not yet synced".to_string())
            };
            answer(path, ready, progressing, m).status
        };
        assert_eq!(status("/healthz", false, true), StatusCode::OK);
        assert_eq!(status("/livez", false, true), StatusCode::OK);
        assert_eq!(
            status("/healthz", true, false),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status("/readyz", false, true),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status("/readyz", true, true), StatusCode::OK);
        assert_eq!(
            answer("/metrics", Err("x".into()), true, m),
            Answer::metrics("x 1\n".into())
        );
        assert_eq!(status("/", true, true), StatusCode::NOT_FOUND);
    }
}
