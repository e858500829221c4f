//! A client-side request limit per API server, as client-go's
//! (`--kube-qps`, `--kube-burst`; client-go's `flowcontrol` token bucket,
//! kubernetes/client-go `util/flowcontrol/throttle.go`): a bucket of
//! `burst` tokens refilled at `qps` per second; each request takes one,
//! and waits for it when the bucket is empty. A tower layer on the kube
//! client, so every request (list, watch, get, patch) counts; the Event
//! recorder has a client and so a bucket of its own (`run::run_gated`).
//!
//! One bucket per [`client`] built: the management cluster's and each
//! workload cluster's API server have their own. And one deadline per
//! call ([`timed`]).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use kube::{client::ClientBuilder, Client, Config};
use tower::{Layer, Service};

use crate::leader::Gate;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

/// The Lease client's own bucket: an elector makes one request per retry
/// period (2 s) and one on release; 5/s with a burst of 5 never throttles
/// it, and it shares nothing with the reconciles' --kube-qps.
pub const LEASE: Limits = Limits { qps: 5.0, burst: 5 };

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: 50.0,
            burst: 100,
        }
    }
}

/// This controller's `User-Agent`: kube-rs sends none, and an API server's
/// audit log and its API priority and fairness can then tell these
/// requests from every other client's only by credentials.
const USER_AGENT: &str = concat!("sandbox-readiness-controller/", env!("CARGO_PKG_VERSION"));

/// `config`, its requests naming this controller.
fn named(mut config: Config) -> Config {
    config.headers.push((
        http::header::USER_AGENT,
        http::header::HeaderValue::from_static(USER_AGENT),
    ));
    config
}

/// A kube client for `config` behind its own token bucket of `l`, naming
/// itself.
pub fn client(config: Config, l: Limits) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(named(config))?
        .with_layer(&QpsLayer::new(l))
        .build())
}

/// [`client`], whose writes are sent only while `gate` is open: asked
/// after the request's wait in the bucket, right before it is sent, so a
/// leader deposed while its write waited for a token sends nothing.
pub fn gated_client(config: Config, l: Limits, gate: Gate) -> Result<Client, kube::Error> {
    // kube's `with_layer` wraps what is there: the gate goes on first, so
    // the bucket is outside it and its wait comes before the gate's check.
    Ok(ClientBuilder::try_from(named(config))?
        .with_layer(&GateLayer(gate))
        .with_layer(&QpsLayer::new(l))
        .build())
}

/// A write refused by the client because this process is not the leader
/// (any request but GET, HEAD and OPTIONS).
#[derive(Debug, thiserror::Error)]
#[error("not sent: this controller is not the leader")]
pub struct NotLeader;

/// Whether `e` is the gate's refusal ([`NotLeader`]).
pub fn not_leader(e: &kube::Error) -> bool {
    match e {
        kube::Error::Service(b) => b.is::<NotLeader>(),
        _ => false,
    }
}

#[derive(Clone)]
struct GateLayer(Gate);

impl<S> Layer<S> for GateLayer {
    type Service = GateService<S>;
    fn layer(&self, inner: S) -> GateService<S> {
        GateService {
            inner,
            gate: self.0.clone(),
        }
    }
}

pub struct GateService<S> {
    inner: S,
    gate: Gate,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Service<http::Request<B>> for GateService<S>
where
    S: Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let read = matches!(
            *req.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        if !read && !self.gate.may_write() {
            return Box::pin(std::future::ready(Err(Box::new(NotLeader) as BoxError)));
        }
        let f = self.inner.call(req);
        Box::pin(async move { f.await.map_err(Into::into) })
    }
}

/// Every single request waits at most this long: a hung API server must not
/// hold a reconcile for kube's 295 s read timeout (sized for watches).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `f` with [`CALL_TIMEOUT`]; a timeout reads as a service error.
pub async fn timed<T>(f: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service("no answer within 10 s".into())),
    }
}

/// The token bucket. Pure over the instants it is given.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub fn new(l: Limits, now: Instant) -> Bucket {
        let burst = f64::from(l.burst.max(1));
        Bucket {
            qps: l.qps,
            burst,
            state: Mutex::new((burst, now)),
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + elapsed * self.qps).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.0) / self.qps))
        }
    }
}

#[derive(Clone)]
pub struct QpsLayer {
    bucket: Arc<Bucket>,
}

impl QpsLayer {
    pub fn new(l: Limits) -> QpsLayer {
        QpsLayer {
            bucket: Arc::new(Bucket::new(l, Instant::now())),
        }
    }
}

impl<S> Layer<S> for QpsLayer {
    type Service = Qps<S>;
    fn layer(&self, inner: S) -> Qps<S> {
        Qps {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            token: false,
        }
    }
}

/// The service: ready only once it holds a token (tower's contract: the
/// caller polls readiness before each call, as kube's buffer does).
pub struct Qps<S> {
    inner: S,
    bucket: Arc<Bucket>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    token: bool,
}

impl<S, R> Service<R> for Qps<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.token {
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.token = true,
                Err(d) => self.wait = Some(Box::pin(tokio::time::sleep(d))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let t0 = Instant::now();
        let b = Bucket::new(
            Limits {
                qps: 10.0,
                burst: 3,
            },
            t0,
        );
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert_eq!(b.take(t0 + Duration::from_millis(100)), Ok(()));
        assert!(b.take(t0 + Duration::from_millis(150)).is_err());
        // A long rest refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }

    /// A service that answers every request it is sent with its method.
    struct Echo;
    impl Service<http::Request<()>> for Echo {
        type Response = http::Method;
        type Error = BoxError;
        type Future = std::future::Ready<Result<http::Method, BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(req.method().clone()))
        }
    }

    #[tokio::test]
    async fn a_closed_gate_sends_reads_and_no_writes() {
        let req = |m: http::Method| http::Request::builder().method(m).body(()).unwrap();
        let mut closed = GateLayer(Gate::closed()).layer(Echo);
        assert_eq!(
            closed.call(req(http::Method::GET)).await.unwrap(),
            http::Method::GET
        );
        for m in [
            http::Method::PATCH,
            http::Method::POST,
            http::Method::PUT,
            http::Method::DELETE,
        ] {
            let e = closed.call(req(m)).await.unwrap_err();
            assert!(e.is::<NotLeader>(), "{e}");
            assert!(not_leader(&kube::Error::Service(e)));
        }
        let mut open = GateLayer(Gate::always()).layer(Echo);
        assert_eq!(
            open.call(req(http::Method::PATCH)).await.unwrap(),
            http::Method::PATCH
        );
    }
}
