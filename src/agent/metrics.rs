//! The metrics port (`serve --metrics-listen`): HTTP/1.1, `GET /metrics`
//! only, the text [`crate::metrics::render`] makes of the report the owner
//! published last. A scrape reads; it never asks for an observation.
//!
//! Same transport policy as the gRPC port (checked in
//! [`super::check_security`]), its own TLS configuration (HTTP/1.1 ALPN, the
//! `--metrics-client-name` names), and its own small connection caps, so
//! scrapers and gRPC clients never take each other's slots. The server is
//! the workspace's one for such endpoints, [`crate::endpoints`].

use std::sync::Arc;

use tokio::{net::TcpListener, sync::Semaphore};

use crate::{
    agent::{service::Service, state::State},
    endpoints::{self, Answer, Limits, StatusCode},
    metrics::render,
    proto::v1::DesiredState,
    tls::ServerTls,
};

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

    fn answer(&self, path: &str) -> Answer {
        if path == "/metrics" {
            Answer::metrics(self.text())
        } else {
            Answer::text(StatusCode::NOT_FOUND, "not found: only /metrics is served")
        }
    }
}

/// Serves `listener` until the task is dropped: plaintext, or TLS with
/// `tls` (built by [`ServerTls::load_for_scrapers`]), within
/// [`Limits::default`]: a few Prometheus servers, each keeping one
/// connection open.
pub async fn serve(listener: TcpListener, tls: Option<ServerTls>, scrape: Scrape) {
    let answer = move |path: &str| scrape.answer(path);
    match tls {
        Some(tls) => endpoints::serve_tls(listener, tls, Limits::default(), answer).await,
        None => endpoints::serve_plain(listener, Limits::default(), answer).await,
    }
}
