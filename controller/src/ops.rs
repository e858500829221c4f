//! The controller as a cluster component: the flags and the glue for
//! leader election ([`crate::leader`]) around the loop ([`crate::run`]).
//! Kept apart from `main.rs` so the loop's CLI stays the loop's.

use std::time::Duration;

use kube::Client;
use tokio::{sync::oneshot, task::JoinHandle};

use crate::leader::{self, Elector, Gate, Timing};

/// Flags of the component (leader election; names as kube-controller-manager's).
#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// Elect a leader on a Lease so that only one replica writes (off by
    /// default, as controller-runtime's; deploy/ turns it on).
    #[arg(long, env = "SANDBOX_READINESS_LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = "sandbox-readiness-controller")]
    pub leader_elect_resource_name: String,
    /// The Lease's namespace (default: the pod's namespace, else `default`).
    #[arg(long)]
    pub leader_elect_resource_namespace: Option<String>,
    /// How long a standby waits, from the last change it saw, before it
    /// takes an unrenewed Lease.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire or renew.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// Serve /healthz, /readyz and /metrics on this address (plain HTTP;
    /// off unless given).
    #[arg(long, env = "SANDBOX_READINESS_HTTP_LISTEN")]
    pub http_listen: Option<std::net::SocketAddr>,
    /// Requests per second to each API server (a token bucket, as
    /// client-go's).
    #[arg(long, default_value_t = 50.0)]
    pub kube_qps: f64,
    /// Requests each API server may get at once above --kube-qps.
    #[arg(long, default_value_t = 100)]
    pub kube_burst: u32,
}

impl OpsArgs {
    fn timing(&self) -> Timing {
        Timing {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// Every kube client's limits (each API server has a bucket of its own).
    pub fn client_limits(&self) -> crate::qps::Limits {
        crate::qps::Limits {
            qps: self.kube_qps,
            burst: self.kube_burst,
        }
    }

    /// Refusals at start, as one line.
    pub fn check(&self) -> Result<(), String> {
        if !(self.kube_qps.is_finite() && self.kube_qps > 0.0) || self.kube_burst == 0 {
            return Err("--kube-qps and --kube-burst must be greater than zero".into());
        }
        if self.leader_elect {
            self.timing().check().map_err(|e| e.to_string())?;
            if self.leader_elect_resource_name.is_empty() {
                return Err("--leader-elect-resource-name must not be empty".into());
            }
        }
        Ok(())
    }
}

/// The running component parts; [`Ops::stop`] hands the Lease back.
pub struct Ops {
    gate: Gate,
    elector: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    /// The endpoints' socket, bound at start; served once the controller's
    /// caches exist ([`crate::http::serve`]).
    listener: Option<tokio::net::TcpListener>,
}

/// SIGTERM → exit within 5 s: the release gets what is left after the
/// loop stopped.
const RELEASE_WITHIN: Duration = Duration::from_secs(3);

impl Ops {
    /// Binds the endpoints (the one refusal: the address) and starts the
    /// elector, which opens and closes `gate` (made by the caller, so the
    /// clients built before can ask it: [`crate::qps::gated_client`]).
    pub async fn start(
        client: &Client,
        a: &OpsArgs,
        gate: Gate,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> Result<Ops, String> {
        let listener = match a.http_listen {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("--http-listen {addr}: {e}"))?;
                if let Ok(bound) = l.local_addr() {
                    tracing::info!("endpoints listening on http://{bound}");
                }
                Some(l)
            }
            None => None,
        };
        if !a.leader_elect {
            metrics.set_leader(true);
            return Ok(Ops {
                gate,
                elector: None,
                listener,
            });
        }
        let ns = a
            .leader_elect_resource_namespace
            .clone()
            .unwrap_or_else(leader::default_namespace);
        let id = leader::identity();
        tracing::info!(identity = %id, lease = %format!("{ns}/{}", a.leader_elect_resource_name), "leader election on; writing only as the leader");
        let mut e = Elector::new(
            client.clone(),
            &ns,
            &a.leader_elect_resource_name,
            &id,
            a.timing(),
            gate.clone(),
            metrics,
        );
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            e.run_until(
                async move {
                    let _ = rx.await;
                },
                RELEASE_WITHIN,
            )
            .await;
        });
        Ok(Ops {
            gate,
            elector: Some((tx, task)),
            listener,
        })
    }

    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// The bound endpoints' socket, once.
    pub fn take_listener(&mut self) -> Option<tokio::net::TcpListener> {
        self.listener.take()
    }

    /// Stops writing at once, then releases the Lease if held.
    pub async fn stop(self) {
        if let Some((tx, task)) = self.elector {
            let _ = tx.send(());
            let _ = tokio::time::timeout(RELEASE_WITHIN + Duration::from_millis(500), task).await;
        }
    }
}
